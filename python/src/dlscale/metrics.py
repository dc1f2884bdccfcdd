"""Progress reports to the dlscale server, off the training loop's critical path.

``report()`` only stores the newest metrics and wakes a daemon thread; the thread POSTs
``{api}/v1/jobs/{job_id}/metrics`` at most once every ``interval`` seconds (older unsent
values are superseded, never queued). A failure is logged once and ignored until a later
POST succeeds again. With no ``api`` the reporter does nothing. For a job that changes batch in
place, each answer carries the batch its launch is to run (``batch()``).
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote


def metrics_payload(
    *,
    step: int,
    samples_per_s: float,
    batch_size: int,
    world_size: int,
    loss: Optional[float],
    samples_seen: int,
    attempt: Optional[int] = None,
    grad: Optional[Mapping[str, Any]] = None,
    compute_time_s: Optional[float] = None,
    max_local_batch: Optional[int] = None,
    micro_steps: Optional[int] = None,
) -> Dict[str, Any]:
    """The body of a metrics report. NaN/inf never reach it: a non-finite ``loss`` becomes null,
    a non-finite ``samples_per_s`` 0, and a ``grad`` (``GradNoiseEstimator.report``) with a
    non-finite or negative value is left out, as is a ``compute_time_s`` (seconds of one
    micro-step's compute alone) that is not a finite number > 0. ``max_local_batch``: the samples
    per GPU one micro-step holds, as ``Job.probe_max_local_batch`` measured them. ``micro_steps``:
    the micro-steps each step ran its per-GPU batch in (gradient accumulation)."""
    if loss is not None:
        loss = float(loss)
        if not math.isfinite(loss):
            loss = None  # NaN/inf are not JSON
    sps = float(samples_per_s)
    if not math.isfinite(sps):
        sps = 0.0
    payload = {
        "step": int(step),
        "samples_per_s": sps,
        "batch_size": int(batch_size),
        "world_size": int(world_size),
        "loss": loss,
        "samples_seen": int(samples_seen),
    }
    if attempt is not None:
        payload["attempt"] = int(attempt)
    g = _grad_field(grad)
    if g is not None:
        payload["grad"] = g
    if max_local_batch is not None and int(max_local_batch) >= 1:
        payload["max_local_batch"] = int(max_local_batch)
    if micro_steps is not None and int(micro_steps) >= 1:
        payload["micro_steps"] = int(micro_steps)
    if compute_time_s is not None:
        c = float(compute_time_s)
        if math.isfinite(c) and c > 0.0:
            payload["compute_time_s"] = c
    return payload


def _grad_field(grad: Optional[Mapping[str, Any]]) -> Optional[Dict[str, float]]:
    """``{"grad_sqr", "grad_var"}`` if both are finite numbers >= 0 (what the server accepts),
    else None."""
    if not grad:
        return None
    try:
        sqr, var = float(grad["grad_sqr"]), float(grad["grad_var"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(sqr) and math.isfinite(var) and sqr >= 0 and var >= 0):
        return None
    return {"grad_sqr": sqr, "grad_var": var}


class MetricsReporter:
    def __init__(
        self,
        api: Optional[str],
        job_id: Optional[str],
        token: Optional[str] = None,
        interval: float = 5.0,
        timeout: float = 3.0,
    ) -> None:
        self.enabled = bool(api) and bool(job_id)
        self.url = f"{api.rstrip('/')}/v1/jobs/{quote(str(job_id), safe='')}/metrics" if self.enabled else None
        self.token = token
        self.interval = max(0.0, float(interval))
        self.timeout = timeout
        self.sent = 0  # successful POSTs
        self.failed = 0
        self._lock = threading.Lock()
        self._pending: Optional[Dict[str, Any]] = None
        self._wake = threading.Event()
        self._closing = False
        self._failing = False
        # The batch the server last answered a report with (batch_in_place jobs), or None.
        self._batch: Optional[Tuple[int, int, int]] = None
        self._thread: Optional[threading.Thread] = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="dlscale-metrics", daemon=True)
            self._thread.start()

    def report(self, payload: Dict[str, Any]) -> None:
        """Never blocks on the network."""
        if not self.enabled:
            return
        with self._lock:
            self._pending = dict(payload)
        self._wake.set()

    def _request(self, url: str, payload: Dict[str, Any]) -> urllib.request.Request:
        req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        return req

    def complete(self, payload: Dict[str, Any], attempts: int = 5, backoff: float = 0.5) -> bool:
        """Tell the server, synchronously, that training completed (``POST .../complete``), so
        the job succeeds even if a stop reached it meanwhile. Retried a few times; whether the
        server took it. A job whose report is lost is relaunched once and finishes at once."""
        if not self.enabled:
            return False
        url = self.url[: -len("/metrics")] + "/complete"
        for i in range(max(1, attempts)):
            try:
                with urllib.request.urlopen(self._request(url, payload), timeout=self.timeout) as resp:
                    resp.read()
                return True
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500:  # refused (e.g. 409: not the current launch): final
                    print(f"dlscale: warning: completion report refused (HTTP {exc.code})",
                          file=sys.stderr, flush=True)
                    return False
            except Exception:
                pass
            time.sleep(backoff * (2 ** i))
        print(f"dlscale: warning: completion report to {url} failed", file=sys.stderr, flush=True)
        return False

    def batch(self) -> Optional[Tuple[int, int, int]]:
        """The batch the server last answered a report with, as ``(batch_size, local_batch_size,
        micro_steps)``: for a job that changes batch in place, what its launch is to run now;
        None before such an answer."""
        with self._lock:
            return self._batch

    def _take_answer(self, body: bytes) -> None:
        try:
            answer = json.loads(body)
        except ValueError:
            return
        batch = answer.get("batch") if isinstance(answer, dict) else None
        if not isinstance(batch, dict):
            return
        values = [batch.get(k) for k in ("batch_size", "local_batch_size", "micro_steps")]
        # bool is an int in Python: refused too.
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            with self._lock:
                self._batch = (values[0], values[1], values[2])

    def _post(self, payload: Dict[str, Any]) -> None:
        try:
            with urllib.request.urlopen(self._request(self.url, payload), timeout=self.timeout) as resp:
                self._take_answer(resp.read())
        except Exception as exc:  # network error, HTTP 4xx/5xx, timeout: log once, go on
            self.failed += 1
            if not self._failing:
                self._failing = True
                detail = f"HTTP {exc.code}" if isinstance(exc, urllib.error.HTTPError) else str(exc)
                print(
                    f"dlscale: warning: metrics report to {self.url} failed ({detail}); "
                    "further failures are not logged",
                    file=sys.stderr,
                    flush=True,
                )
            return
        self.sent += 1
        if self._failing:
            self._failing = False
            print(f"dlscale: metrics reports to {self.url} work again", file=sys.stderr, flush=True)

    def _run(self) -> None:
        last = -math.inf
        while True:
            self._wake.wait()
            self._wake.clear()
            # Rate limit: wait out the rest of the interval; close() cuts the wait short.
            while True:
                with self._lock:
                    closing = self._closing
                delay = last + self.interval - time.monotonic()
                if closing or delay <= 0:
                    break
                self._wake.wait(delay)
                self._wake.clear()
            with self._lock:
                payload, self._pending = self._pending, None
                closing = self._closing
            if payload is not None:
                last = time.monotonic()
                self._post(payload)
            if closing:
                return

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending (ignoring the rate limit) and stop the thread."""
        if not self.enabled or self._thread is None:
            return
        with self._lock:
            self._closing = True
        self._wake.set()
        self._thread.join(timeout)
