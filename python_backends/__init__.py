"""Source of the Triton Python models: `models/` holds the adapters, `fastpath_backends/` the pure logic."""
