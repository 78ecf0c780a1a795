"""sqlwa: what one SQLite commit really costs the storage device."""
