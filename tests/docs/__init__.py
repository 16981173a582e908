"""The README and docs show the files they document as they are."""
