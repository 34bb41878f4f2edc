"""Dialects ember defines (in Python, through IRDL). Imports nothing from passes or frontend."""
from .ember import Ember, ExternOp, KERNEL_ATTR, KERNEL_KINDS, EXTERN_TARGETS, load, make_context, verify_module

__all__ = ["Ember", "ExternOp", "KERNEL_ATTR", "KERNEL_KINDS", "EXTERN_TARGETS", "load",
           "make_context", "verify_module"]
