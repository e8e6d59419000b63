"""`python3 -m unilink.run ...` = torchrun (torch.distributed.run), working on Debian 12.

torch 1.13's Std.from_str finds a flag by iterating the IntFlag, which under Python 3.11
no longer yields 0 (NONE) or combined flags (ALL), so torchrun's defaults
(--redirects 0 --tee 0) crash in to_map. Parse the values directly, then run torchrun."""
import re

from torch.distributed.elastic.multiprocessing import api as _api


def _from_str(cls, vm):
    if re.fullmatch(r"[0-3]", vm):
        return cls(int(vm))
    return {int(k): cls(int(v)) for k, v in (kv.split(":") for kv in vm.split(","))}


_api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main
    main()
