"""Ingest: durable webhooks/s through `ingest`, against nginx answering a fixed 202 and against raw SQLite inserts
of the same rows. The headline posts to 1,000 registered devices (a device picked at random per request), an
ordinary alert's path; one device taking every webhook (its alerts folding into its waiting digest past
DEVICE_QUEUE_MAX) is its own row, measured as often as the headline."""
import json

from harness import (QUEUE_BENCH, RELAY, RUNS, WEBHOOK_BODY, cpu_seconds, devices_file, free_port, healthy, http, jobs_in,
                     peak_rss_mib, phase_folder, relay_env, run, sqlite_store, start, step, stop, summarize, wait_until, wrk)

DEVICES = 1000
SECONDS = 10


def ingest_once(store, folder, devices=DEVICES, seconds=SECONDS, binary=RELAY, **overrides):
    """One ingest process of `binary` on `store`: registers `devices`, posts Example A for `seconds`. Returns its
    figures."""
    port = free_port()
    ingest = start([binary, "ingest"], relay_env(store, PORT=port, METRICS_ADDR="off", **overrides), folder / "ingest.log")
    wait_until(lambda: healthy(port), what="ingest")
    ids = devices_file(port, devices, folder)
    cpu_before = cpu_seconds(ingest.pid)
    rps, errors, answered = wrk(port, WEBHOOK_BODY, ids, folder, seconds=seconds)
    # The process's CPU (every thread) while wrk ran, a webhook: steadier than the rate on a shared host, where a
    # small change hides in the rate's run-to-run spread (bench/ingest_ab.py prints both).
    cpu_us = (cpu_seconds(ingest.pid) - cpu_before) / max(answered, 1) * 1e6
    rss = peak_rss_mib(ingest)
    stop(ingest)
    return {"relay_rps": rps, "errors": errors, "answered": answered, "jobs_stored": jobs_in(store), "rss_mib": rss,
            "cpu_us": cpu_us}


def nginx_once(folder, seconds=SECONDS):
    """nginx answering every POST with a fixed 202, driven by the same wrk script (same paths, same body)."""
    port = free_port()
    conf = folder / "nginx.conf"
    conf.write_text(f"""worker_processes 2; pid {folder}/nginx.pid; error_log {folder}/nginx-error.log; daemon off;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {folder}; proxy_temp_path {folder}; fastcgi_temp_path {folder};
  uwsgi_temp_path {folder}; scgi_temp_path {folder};
  server {{ listen 127.0.0.1:{port}; location / {{ default_type application/json;
    return 202 '{{"status":"queued","id":"00000000-0000-0000-0000-000000000000"}}'; }} }} }}
""")
    nginx = start(["nginx", "-c", conf, "-p", folder], log=folder / "nginx.log")
    wait_until(lambda: http("GET", f"http://127.0.0.1:{port}/")[0] == 202, what="nginx")
    ids = folder / "nginx-ids.txt"
    ids.write_text("\n".join(f"device{n:06d}xx" for n in range(DEVICES)))
    rps, _, _ = wrk(port, WEBHOOK_BODY, ids, folder, seconds=seconds)
    stop(nginx)
    return rps


def bench_ingest(results):
    folder = phase_folder("ingest")
    step(f"ingest: durable webhooks/s to {DEVICES:,} devices vs nginx's fixed 202 vs raw SQLite inserts "
         f"(wrk, 64 keep-alive connections, {SECONDS} s each) × {RUNS}")
    runs = []
    for number in range(1, RUNS + 1):
        run_folder = folder / f"run{number}"
        run_folder.mkdir()
        # DEVICE_QUEUE_MAX out of reach, so every webhook takes the ordinary path however fast ingest gets.
        figures = ingest_once(sqlite_store(run_folder / "ingest.db"), run_folder, DEVICE_QUEUE_MAX=1_000_000)
        figures["nginx_rps"] = nginx_once(run_folder)
        figures["ratio_nginx"] = figures["relay_rps"] / figures["nginx_rps"]
        runs.append(figures)
        for suffix in ("", "-wal", "-shm"):
            (run_folder / f"ingest.db{suffix}").unlink(missing_ok=True)
        step(f"  run {number}: relay {figures['relay_rps']:.0f}/s ({figures['jobs_stored']} jobs stored, "
             f"{figures['errors']} non-2xx), nginx {figures['nginx_rps']:.0f}/s, ratio {figures['ratio_nginx']:.3f}")
    raw = json.loads(run([QUEUE_BENCH, "raw", folder, "--runs", RUNS], capture_output=True, text=True, check=True).stdout)
    for figures, raw_rps in zip(runs, raw["raw_insert_rps"]):
        figures["raw_insert_rps"] = raw_rps
        figures["ratio_raw"] = figures["relay_rps"] / raw_rps
    step(f"  raw SQLite inserts of the same rows: {raw['raw_insert_rps']} rows/s")

    step(f"ingest, one device taking every webhook (DEVICE_QUEUE_MAX as shipped: past it alerts fold into the digest), "
         f"5 s × {RUNS}")
    nginx_median = summarize(runs)["nginx_rps"]["median"]
    folds = []
    for number in range(1, RUNS + 1):
        fold_folder = folder / f"fold{number}"
        fold_folder.mkdir()
        fold = ingest_once(sqlite_store(fold_folder / "fold.db"), fold_folder, devices=1, seconds=5)
        fold["ratio_nginx"] = fold["relay_rps"] / nginx_median
        folds.append(fold)
        step(f"  run {number}, one device: {fold['relay_rps']:.0f}/s ({fold['jobs_stored']} jobs stored)")

    results["ingest"] = summarize(runs)
    results["ingest"]["fold"] = summarize(folds)
    results.setdefault("rss_mib", {})["ingest"] = max(r["rss_mib"] or 0 for r in runs)
