"""CPU tensors that end where an inaccessible page begins: a read or write past a tensor's end faults at once
(SIGSEGV) instead of reading a neighbour's bytes. Triton's interpreter reads CPU tensors in place, so a
launch under it whose tiles read past an input (e.g. 16-row tiles over R rows with a row mask missing) dies
on the first such access. On a GPU the same read lands in torch's cached segment and faults only when the
tensor happens to end one (what `check_topk.py` hit on the H200 after a particular sequence of allocations).
"""

from __future__ import annotations

import ctypes
import mmap

import torch

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
ALIGN = 16  # the launches' pointer alignment
PROT_NONE = 0  # mprotect: no access (the mmap module names only READ, WRITE and EXEC)
_KEEP = []  # the mappings stay alive as long as the process (their tensors may outlive the caller's names)


def guarded(t: torch.Tensor) -> torch.Tensor:
    """A copy of CPU tensor t with its strides (a view keeps its offset in a copy of its whole storage), whose
    storage starts 16-byte aligned and ends less than 16 bytes before a PROT_NONE page."""
    whole = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    return _guarded_flat(whole).as_strided(t.shape, t.stride(), t.storage_offset())


def _guarded_flat(t: torch.Tensor) -> torch.Tensor:
    nbytes = t.numel() * t.element_size()
    page = mmap.PAGESIZE
    data_pages = max(1, -(-(nbytes + ALIGN) // page))
    buf = mmap.mmap(-1, (data_pages + 1) * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if _libc.mprotect(base + data_pages * page, page, PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
    start = (data_pages * page - nbytes) // ALIGN * ALIGN  # 16-byte aligned, as the launches require: a read
    # past the end by less than the gap (< 16 bytes) is not caught
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=start) if nbytes else torch.empty(0, dtype=torch.uint8)
    g = raw.view(t.dtype).view(t.shape)
    g.copy_(t)
    _KEEP.append(buf)
    return g


def guarded_all(tensors: dict) -> dict:
    """Every tensor of a mapping replaced by its guarded copy (other values kept)."""
    return {k: guarded(v) if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}
