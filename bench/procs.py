"""The processes under test: start them, read their memory and CPU from /proc, stop them."""

import os
import subprocess
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Proc:
    def __init__(self, args, env, log_path):
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def _status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB -> MiB
        raise RuntimeError(f"no {field} for pid {self.proc.pid}")

    def rss_mib(self):
        return self._status("VmRSS")

    def peak_rss_mib(self):
        return self._status("VmHWM")

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def settle(self, quiet=3.0, timeout=300):
        """Waits until the process has used almost no CPU for `quiet` seconds: its start-up (initial lists,
        the first pass over every object) is over."""
        deadline = time.monotonic() + timeout
        last = self.cpu_seconds()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            self.check_alive()
            now = self.cpu_seconds()
            if now - last < 0.02 * quiet:
                return
            last = now
        raise TimeoutError(f"{self.log_path}: still busy after {timeout}s")

    def check_alive(self):
        if self.proc.poll() is not None:
            tail = open(self.log_path).read()[-2000:]
            raise RuntimeError(f"process exited ({self.proc.returncode}); log {self.log_path}:\n{tail}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
