"""sparkpair: two DGX Sparks, one serving box."""

__version__ = "0.1.0"
