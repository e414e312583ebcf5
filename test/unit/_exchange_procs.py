"""The push protocol across R concurrent processes on one host (`peer.file_backed`), each running one rank's launch
under Triton's interpreter (`_exchange_kernel.rank_exchange`): run by test_exchange.py.

python test/unit/_exchange_procs.py R DIR [SKIP_RANK [fault]]   prints one JSON line
fault: serving builds (`guard` ON_ERROR "fault"): each rank's error word holds the address of its host copy (a file,
so the parent reads it after the rank died); the failing program writes the copy, then stores to address 0x0.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["TRITON_INTERPRET"] = "1"


def rank_main(rank: int, R: int, folder: str, skip: int, polls: int, fault: bool) -> None:
    import torch

    from _exchange_kernel import rank_exchange
    from sgl_amd_mono.common import guard, peer

    N, BLOCK = 300, 128
    g = torch.Generator().manual_seed(1000 + rank)
    x = (torch.randn(N, generator=g) * torch.logspace(-3, 3, N)).float()
    buf = peer.file_backed(R, rank, R * N * 8, os.path.join(folder, "peers"))
    out, err = torch.zeros(N), guard.new_error_word("cpu")
    if fault:  # a serving build: the first error writes this copy, then faults
        copy = torch.from_file(os.path.join(folder, f"copy{rank}"), shared=True, size=guard.ERR_WORDS,
                               dtype=torch.int64)
        err[guard.ERR_FIELDS.index("host_copy")] = copy.data_ptr()
    open(os.path.join(folder, f"ready{rank}"), "w").close()  # a start barrier: imports take seconds a process
    while sum(os.path.exists(os.path.join(folder, f"ready{r}")) for r in range(R)) < R:
        time.sleep(0.01)
    t0 = time.time()
    rank_exchange[(1,)](x, out, buf.ptrs, err, rank, 1, polls, N=N, R=R, BLOCK=BLOCK, SKIP_PUSH=rank == skip,
                        TIMER=False)
    e = guard.read_error(err)
    torch.save({"x": x, "out": out, "error": e.describe({7: "toy"}, ["push", "sum"]) if e else None,
                "seconds": time.time() - t0}, os.path.join(folder, f"rank{rank}.pt"))


def main(R: int, folder: str, skip: int, fault: bool) -> None:
    import torch
    import torch.multiprocessing as mp

    from sgl_amd_mono.common import guard

    with open(os.path.join(folder, "peers"), "wb") as f:
        f.write(bytes(R * (-(-(R * 300 * 8) // 256) * 256)))
    for r in range(R):
        with open(os.path.join(folder, f"copy{r}"), "wb") as f:
            f.write(bytes(8 * guard.ERR_WORDS))
    polls = 3000  # the deadline in polls (~2 ms each under the interpreter): well past a healthy exchange (< 0.4 s)
    procs = [mp.get_context("spawn").Process(target=rank_main, args=(r, R, folder, skip, polls, fault)) for r in range(R)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    if fault:  # every rank died at address 0x0 (or returned): what its host copy names
        copies = []
        for r in range(R):
            w = torch.from_file(os.path.join(folder, f"copy{r}"), shared=False, size=guard.ERR_WORDS, dtype=torch.int64)
            e = guard.read_error(w)
            copies.append(e.describe({7: "toy"}, ["push", "sum"]) if e else None)
        print(json.dumps({"exitcodes": [p.exitcode for p in procs], "copies": copies,
                          "returned": [os.path.exists(os.path.join(folder, f"rank{r}.pt")) for r in range(R)]}))
        return
    res = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(R)]
    want = res[0]["x"].clone()
    for r in range(1, R):
        want = want + res[r]["x"]
    print(json.dumps({"exitcodes": [p.exitcode for p in procs], "errors": [r["error"] for r in res],
                      "seconds": [round(r["seconds"], 2) for r in res],
                      "ranks_equal": all(torch.equal(r["out"], res[0]["out"]) for r in res),
                      "rank_order_sum": bool(torch.equal(res[0]["out"], want))}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else -1,
         len(sys.argv) > 4 and sys.argv[4] == "fault")
