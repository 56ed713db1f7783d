"""Runs the real bootstrap the way the sidecar does (docs/runner-protocol.md, "Starting a
child"): SDK files plus a catalog.json in a directory, `python -I -u -B SDK_DIR/ptc_bootstrap.py`,
a cleared environment, the job on stdin."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SDK_TEMPLATE = os.path.join(REPO, "sdk-template")

# Bounds one child: a hung child fails its test instead of hanging the suite.
CHILD_TIMEOUT_SECONDS = 30


def tool(name, python_name, properties=None, required=(), description="", signature=None,
         output_schema=None, **schema_extra):
    """A catalog.json entry."""
    schema = {"type": "object"}
    if properties is not None:
        schema["properties"] = properties
    if required:
        schema["required"] = list(required)
    schema.update(schema_extra)
    return {
        "name": name,
        "python_name": python_name,
        "signature": signature or "%s(...)" % python_name,
        "description": description,
        "input_schema": schema,
        "output_schema": output_schema,
    }


class SdkDirs:
    """One SDK_DIR per distinct catalog, under one temporary root."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="ptc-sdk-test-")
        self._dirs = {}

    def sdk_dir(self, catalog_text):
        found = self._dirs.get(catalog_text)
        if found:
            return found
        path = os.path.join(self.root, "sdk%d" % len(self._dirs))
        os.mkdir(path)
        # Every file of the template, as the sidecar embeds and writes them all.
        for name in sorted(os.listdir(SDK_TEMPLATE)):
            if name.endswith(".py"):
                shutil.copy(os.path.join(SDK_TEMPLATE, name), os.path.join(path, name))
        with open(os.path.join(path, "catalog.json"), "w", encoding="utf-8") as f:
            f.write(catalog_text)
        self._dirs[catalog_text] = path
        return path

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


def child_env(scratch):
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": scratch,
        "TMPDIR": scratch,
        "PYTHONIOENCODING": "utf-8",
        # The sidecar always tells a child which layers to apply (a child told nothing fails
        # closed); these tests exercise the SDK, the sandbox has its own (tests/all/sandbox.rs).
        "PTC_SANDBOX": '{"landlock": false, "seccomp": false}',
    }


def command(sdk_dir):
    return [sys.executable, "-I", "-u", "-B", os.path.join(sdk_dir, "ptc_bootstrap.py")]


def run_child(dirs, catalog, job, timeout=CHILD_TIMEOUT_SECONDS):
    """`(exit_code, stdout, stderr)` of one run; `catalog` is the list of tools or a raw text."""
    if not isinstance(catalog, str):
        catalog = json.dumps({"version": 1, "tools": catalog})
    sdk_dir = dirs.sdk_dir(catalog)
    scratch = tempfile.mkdtemp(dir=dirs.root, prefix="run-")
    proc = subprocess.run(
        command(sdk_dir),
        input=job if isinstance(job, bytes) else json.dumps(job).encode(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scratch,
        env=child_env(scratch),
        timeout=timeout,
        start_new_session=True,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()
