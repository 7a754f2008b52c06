"""Class 5/6, GPU only: CUDA IPC to a child process that finishes the result.

Tries: starts a torch.multiprocessing child (named hst-gpu_ipc_child) and sends it the output
tensor through CUDA IPC; the child fills it in after the call returned and lives on.
Gates must report: SB002 (process started), SB005 (a process left, swept) or CR005 / SB010; no
process may be left.
"""

import torch
import torch.multiprocessing as mp


def _child(out, x, weight, eps):
    try:
        import ctypes
        ctypes.CDLL(None).prctl(15, b"hst-gpu_ipc_chi", 0, 0, 0)
    except Exception:
        pass
    torch.cuda._sleep(20_000_000)
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
    torch.cuda.synchronize()
    import time
    time.sleep(30)


def rms_norm(x, weight, eps):
    out = torch.empty_like(x)
    ctx = mp.get_context("spawn")
    ctx.Process(target=_child, args=(out, x, weight, eps), daemon=False).start()
    return out
