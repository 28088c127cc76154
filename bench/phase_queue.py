"""Queue: QueueBench's enqueue and claim + complete figures on SQLite (claim rate at 1M queued vs 10k)."""
import json

from harness import QUEUE_BENCH, RUNS, phase_folder, run, step, summarize


def queue_runs(output):
    """QueueBench's {figure: [one value per run]} → [{figure: value}] with the ratios of each run."""
    lists = {k: v for k, v in output.items() if isinstance(v, list)}
    runs = [{k: v[n] for k, v in lists.items()} for n in range(len(next(iter(lists.values()))))]
    for figures in runs:
        figures["claim_ratio"] = figures["claim_rate_1m"] / figures["claim_rate_10k"]
        if "raw_insert_rps" in figures:
            figures["enqueue_ratio"] = figures["enqueue_rps"] / figures["raw_insert_rps"]
    return runs


def bench_queue(results):
    folder = phase_folder("queue")
    step(f"queue: raw SQLite inserts vs enqueue; claim + complete at 10,000 vs 1,000,000 queued × {RUNS} (about a minute)")
    output = json.loads(run([QUEUE_BENCH, folder, "--runs", RUNS], capture_output=True, text=True, check=True).stdout)
    queue = summarize(queue_runs(output))
    queue["prefill_rps"] = output["prefill_rps"]
    results["queue"] = queue
    step(f"  enqueue {output['enqueue_rps']}/s (raw {output['raw_insert_rps']}/s); claim {output['claim_rate_10k']}/s at 10k, "
         f"{output['claim_rate_1m']}/s at 1M; {output['claim_cpu_us_10k']} µs of CPU per job claimed and completed at 10k "
         f"(bare statements: {output['floor_bare_cpu_us']} µs, {output['floor_bare_cpu_us_no_secure_delete']} µs without secure_delete)")
