"""titan_log.py LOG validate|loss|grad_norm STEP: prints the value TorchTitan's console LOG shows for STEP, as
printed ("validate step:  6  loss:  6.0643" -> 6.0643; "step:  4  loss:  6.27862  grad_norm:  0.9380" -> the
field), the last such line's; exits non-zero, naming LOG, when it has none."""
import re
import sys

log, what, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
pat = (r"validate step:\s*(\d+)\s+loss:\s*([0-9.]+)" if what == "validate"
       else r"INFO - step:\s*(\d+)\s+loss:\s*([0-9.]+)\s+grad_norm:\s*([0-9.]+)")
vals = [m for m in (re.search(pat, l) for l in open(log)) if m and int(m.group(1)) == step]
if not vals:
    sys.exit(f"{log}: no {what} line for step {step}")
print(vals[-1].group(3 if what == "grad_norm" else 2))
