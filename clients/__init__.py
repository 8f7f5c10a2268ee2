"""Client libraries for triton-fastpath: a thin gRPC client and (later) SDKs generated from the repository."""
