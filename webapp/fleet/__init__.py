"""The fleet: GPU generations (from the catalogue), sites, nodes, GPUs, PCR policies."""
