"""The weights edge: the wire format, buckets, shared-memory buckets, the broadcast group, edges
between groups."""
