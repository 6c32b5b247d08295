"""What every part of gpushare shares about the API, at the bottom of the shell: pure (no
I/O, no clock reads), importing only `gpushare.model`.

* `contracts`: the names users and components share (labels, annotations, resource names,
  the default queue) and the codec of the GPU binding.
* `objects`: `Obj`, typed reads of raw API objects (`Meta`, `field_dict`, owner references,
  LabelSelector matching, a Node's required nodeInfo).
* `quantity`: the one parser of Kubernetes quantities.
* `taints`: which of a node's taints keep pods out, which tolerations match.
* `timefmt`: the one home of RFC 3339 (`metav1.Time`, `MicroTime`, log timestamps).
"""
