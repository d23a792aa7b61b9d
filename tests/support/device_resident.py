"""CPU stand-ins for GPU tensors that refuse to be read by the host: the CPU check of "never waits for the GPU".

On a GPU, the host waits whenever it reads a device value (``.item()``, ``int()``/``bool()`` of a tensor,
``.tolist()``, ``.cpu()``, a blocking copy to host memory, boolean-mask indexing, ``unique``, ...). On CPU nothing
waits, so code that would block a GPU's host thread runs unnoticed. Wrapping the inputs in
:class:`DeviceResident` makes every such read raise :class:`HostRead`; what is computed from them stays
``DeviceResident``, and every copy from them into a plain (host) tensor is recorded with its ``non_blocking`` flag
in :attr:`DeviceResident.copies`. The GPU counterpart is ``torch.cuda.set_sync_debug_mode("error")``
(tests/gpu/test_index_k_capture_gpu.py).
"""

from __future__ import annotations

import torch

_T = torch.Tensor
_READS = {
    _T.item,
    _T.tolist,
    _T.__bool__,
    _T.__int__,
    _T.__float__,
    _T.__index__,
    _T.numpy,
    _T.cpu,
    _T.nonzero,
    torch.nonzero,
    _T.unique,
    torch.unique,
    _T.masked_select,
    torch.masked_select,
    torch.equal,
    _T.__repr__,
    _T.__format__,
    _T.__array__,
}


class HostRead(AssertionError):
    """The host read a value of a tensor that lives on the device."""


def _is_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class DeviceResident(torch.Tensor):
    copies: list[bool] = []  # non_blocking of every copy into a host tensor, in order

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _READS:
            raise HostRead(f"{getattr(func, '__name__', func)} reads a device value on the host")
        if func in (_T.__getitem__, _T.__setitem__) and _is_bool_index(args[1]):
            raise HostRead("boolean-mask indexing reads the mask on the host")
        if func is _T.to and any(a == "cpu" or a == torch.device("cpu") for a in (*args[1:], kwargs.get("device"))):
            raise HostRead(".to('cpu') waits for the device")
        if func is _T.copy_ and isinstance(args[1], cls) and not isinstance(args[0], cls):
            cls.copies.append(bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False)))
        return super().__torch_function__(func, types, args, kwargs)


def on_device(t: torch.Tensor) -> DeviceResident:
    return t.as_subclass(DeviceResident)
