"""``kubectl debug`` no longer panics: ephemeral containers are not served, and the 404
carries (empty) details as kube-apiserver's does, so kubectl says so plainly."""

from __future__ import annotations


def test_kubectl_debug_says_ephemeral_containers_are_unavailable(server, kubectl):
    kubectl.run("run", "p", "--image=busybox", "--", "sleep", "100")
    done = kubectl.run("debug", "p", "--image=busybox", "-c", "dbg", "--profile=general",
                       "--", "true", check=False)
    assert done.returncode != 0
    assert "panic" not in done.stderr, done.stderr
    assert "ephemeral containers are disabled for this cluster" in done.stderr, done.stderr
