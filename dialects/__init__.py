"""Dialects ember defines (in Python, through IRDL), and the contract of `ember.*` attributes
between stages (contract.py). Imports nothing from passes or frontend."""
from . import contract
from .contract import ContractError, KERNEL_KINDS, verify as verify_module
from .ember import Ember, ExternOp, EXTERN_CALLEES, extern_callee, load, make_context, make_extern

__all__ = ["contract", "ContractError", "Ember", "ExternOp", "KERNEL_KINDS", "EXTERN_CALLEES",
           "extern_callee", "load", "make_context", "make_extern", "verify_module"]
