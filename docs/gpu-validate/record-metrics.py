"""Record a GPU's readings through a load, for docs/monitoring.md's dashboard picture.

Runs on the device tool's GPU machine (no DCGM there): nvidia-smi samples the fields dcgm-exporter's default counters
export (utilization, frame buffer used and free, GPU and memory temperature, power, SM clock) once a second, through
IDLE_S seconds idle, LOAD_S seconds of bf16 matrix products on a LOAD_GIB GiB working set (PyTorch), and IDLE_S
seconds idle again. Writes nvidia-smi's CSV, one line per sample, to the file named as the first argument, with a
header line naming the fields and a last comment line giving the load's start and end (UTC). The monitoring role's
tests turn it into dcgm-exporter's text format.
"""

from __future__ import annotations

import subprocess
import sys
import time

FIELDS = (
    "timestamp,index,uuid,name,pci.bus_id,driver_version,utilization.gpu,utilization.memory,memory.used,memory.free,"
    "temperature.gpu,temperature.memory,power.draw,clocks.sm"
)
IDLE_S, LOAD_S, LOAD_GIB = 20, 50, 48


def main(path: str) -> int:
    probe = subprocess.run(
        ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode:
        print(f"nvidia-smi refused the fields: {probe.stdout}{probe.stderr}", file=sys.stderr)
        return 1
    import torch  # the machine's own PyTorch

    with open(path, "w", encoding="utf-8") as out:
        out.write(f"# fields: {FIELDS}\n")
        out.flush()
        sampler = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "1000"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            time.sleep(IDLE_S)
            n = 8192
            blocks = max(1, (LOAD_GIB << 30) // (n * n * 2))
            work = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(blocks)]
            torch.cuda.synchronize()
            started = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime())
            print(f"load: {blocks} bf16 {n}x{n} matrices ({blocks * n * n * 2 / 2**30:.1f} GiB)", flush=True)
            end, products = time.monotonic() + LOAD_S, 0
            while time.monotonic() < end:
                for i in range(0, blocks - 1, 2):
                    torch.matmul(work[i], work[i + 1])
                    products += 1
                torch.cuda.synchronize()
            ended = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime())
            print(f"load: {products} products in {LOAD_S} s", flush=True)
            del work
            torch.cuda.empty_cache()
            time.sleep(IDLE_S)
        finally:
            sampler.terminate()
            sampler.wait()
        out.write(f"# load: {started} to {ended} UTC\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
