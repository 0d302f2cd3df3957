# SPDX-License-Identifier: Apache-2.0
"""Let torchrun work with a PyTorch built without libuv (Debian's, in the CPU images).

PyTorch 2.4+ makes libuv the default TCPStore backend, and the stores behind
torchrun's rendezvous and its workers' process groups ask for it without a way
to say no; a build without libuv then fails with "use_libuv was requested but
PyTorch was build without libuv support". Images whose torch is such a build
import this module at interpreter start (a .pth line written by
definitions/common/install-hpcai.sh). It sets USE_LIBUV=0 and makes the
modules that create those stores pass use_libuv=False unless told otherwise.
It imports no torch itself; newer PyTorch builds are left alone.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

# Where the TCPStore that builds stores without naming a backend comes from.
_STORE_USERS = {
    "torch.distributed",  # dist.TCPStore: the dynamic (c10d) rendezvous
    "torch.distributed.rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
}


_WRAPPED: dict = {}


def _libuv_off_by_default(base):
    if getattr(base, "_hpcai_libuv_default", False):
        return base
    if base in _WRAPPED:
        return _WRAPPED[base]

    class TCPStore(base):
        _hpcai_libuv_default = True

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", os.environ.get("USE_LIBUV", "1") == "1")
            super().__init__(*args, **kwargs)

    TCPStore.__name__ = TCPStore.__qualname__ = base.__name__
    _WRAPPED[base] = TCPStore
    return TCPStore


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if hasattr(module, "TCPStore"):
            module.TCPStore = _libuv_off_by_default(module.TCPStore)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in _STORE_USERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    os.environ.setdefault("USE_LIBUV", "0")
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
