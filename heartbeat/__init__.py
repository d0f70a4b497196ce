"""glbd link-quality heartbeats (v1). Imports only the stdlib and itself."""
