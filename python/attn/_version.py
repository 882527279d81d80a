"""The libattn version this package speaks to (include/attn.h's ATTN_VERSION_STRING)."""
__version__ = "0.4.0"
