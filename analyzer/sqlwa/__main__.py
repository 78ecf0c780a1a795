from sqlwa.cli import main

main()
