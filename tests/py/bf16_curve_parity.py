"""bf16_curve_parity.py BF16_REF.jsonl BF16_DEV.jsonl FP32_DEV.jsonl: 10 bf16 steps of the device within 1e-4
relative of cpu-ref at step 1 and 1e-3 at every step, and bf16 itself moves step 1 over 10x that difference."""
import json, sys
ref, ocl, fp32 = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:4])
rel = [abs(o - r) / abs(r) for r, o in zip(ref, ocl)]
bf16_effect = abs(ref[0] - fp32[0]) / abs(ref[0])
print(f"bf16 opencl vs cpu-ref: step-1 loss {ocl[0]:.10f} vs {ref[0]:.10f} (relative {rel[0]:.3e}), "
      f"{len(rel)} steps max relative {max(rel):.3e}; bf16 vs fp32 at step 1 {bf16_effect:.3e}")
ok = len(ref) == len(ocl) == 10 and rel[0] <= 1e-4 and max(rel) <= 1e-3 and bf16_effect > 10 * rel[0]
sys.exit(0 if ok else 1)
