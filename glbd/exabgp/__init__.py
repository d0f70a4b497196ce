"""ExaBGP integration: API codec (pure), supervisor and bridge."""
