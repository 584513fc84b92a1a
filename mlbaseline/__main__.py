"""`python -m mlbaseline` works like `mlb`."""

from mlbaseline.cli import main

if __name__ == "__main__":
    main()
