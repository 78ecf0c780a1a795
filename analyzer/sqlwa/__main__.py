import sys

try:
    from sqlwa.cli import main
except KeyboardInterrupt:  # Ctrl-C in the interpreter's first fraction of a second
    print("sqlwa: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

main()
