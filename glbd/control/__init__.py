"""glbctl <-> glbd control socket: JSON-lines codec (``protocol``), asyncio server (``server``)."""
