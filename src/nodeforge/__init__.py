"""nodeforge: turn bare-metal GPU/RDMA servers into validated Kubernetes workers."""

__version__ = "0.1.0"
