"""Class 2/3, an object that lies (a payload for whoever unpickles the output).

Tries: returns the right values as a Tensor subclass whose __reduce_ex__ makes unpickling run
code: it writes /tmp/agentloop-hostile-lie_pickle_payload-judge in the process that receives the
output. A boundary that pickles outputs to the judge runs the payload there.
Gates must report: SB007 (output not a plain torch.Tensor); the marker must never exist.
"""

import torch

_PAYLOAD = "open('/tmp/agentloop-hostile-lie_pickle_payload-judge', 'w').write('unpickled in the judge')"


class Payload(torch.Tensor):
    def __reduce_ex__(self, protocol):
        return (eval, (_PAYLOAD,))


def rms_norm(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out.as_subclass(Payload)
