"""RFC 5880/5881 single-hop BFD engine. Imports only the stdlib and itself."""
