#!/bin/sh
# A sync hook for Notes in plain shell and jq (metacontroller's CompositeController protocol):
#
#   samplectl reconcile --gvr hooks.example.com/v1/notes --child v1/configmaps \
#       --hook examples/hooks/shell/sync.sh
#
# The request arrives on stdin; the answer goes to stdout. A Note wants one ConfigMap, note-NAME, holding
# its text, and its status gives the text's length.
set -eu
jq -c '
  .parent as $note
  | ($note.spec.text // "") as $text
  | {
      status: {length: ($text | length)},
      children: [{
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: {name: ("note-" + $note.metadata.name)},
        data: {text: $text}
      }]
    }
'
