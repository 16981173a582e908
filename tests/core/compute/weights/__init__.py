"""The weights edge: the wire format, broadcasts, edges."""
