# Where jaq's definitions differ from gojq's (shell-operator's jqFilter engine) in what a jqFilter can
# meet, gojq's, written in jq and loaded after jaq's own. conformance/report.py's run shows each.

# shell-operator compiles filters without gojq's environment loader: `env` and `$ENV` are `{}`.
def env: {};

# A step of 0 gives nothing in gojq; jaq's range would never end.
def _jaq_range($from; $upto; $by): range($from; $upto; $by);
def range($from; $upto; $by): if $by == 0 then empty else _jaq_range($from; $upto; $by) end;

# gojq (and jq) join null as "", numbers and booleans as their JSON, and refuse arrays and objects.
def join($s):
  reduce .[] as $x (null;
    (if . == null then "" else . + $s end) +
    ($x | if . == null then ""
          elif type == "string" then .
          elif type == "number" or type == "boolean" then tojson
          else error("join cannot be applied to an array including: \(type) (\(tojson))") end)
  ) // "";
