#!/bin/sh
# upper.sh: a command role that speaks Mew's JSON-lines protocol (see README.md).
# stdin: the message text. stdout: one A2A StreamResponse object per line.
set -eu

input=$(cat)
if [ -z "$input" ]; then
    echo "upper: nothing to upper-case: send some text" >&2
    exit 2
fi

# 1. A status update: the task is WORKING, with a note for whoever watches.
printf '%s\n' '{"statusUpdate":{"status":{"state":"TASK_STATE_WORKING","message":{"parts":[{"text":"upper-casing..."}]}}}}'

# 2. The result, as an artifact update. awk upper-cases the text and writes it
#    as one JSON string (quotes, backslashes and control characters escaped,
#    lines joined with \n).
text=$(printf '%s\n' "$input" | awk '
BEGIN { for (i = 1; i < 32; i++) ctrl = ctrl sprintf("%c", i) }
function json(s,   out, i, c, k) {
    out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" || c == "\"") out = out "\\" c
        else if (c == "\t") out = out "\\t"
        else if ((k = index(ctrl, c)) > 0) out = out sprintf("\\u%04x", k)
        else out = out c
    }
    return out
}
{ text = (NR > 1 ? text "\\n" : "") json(toupper($0)) }
END { printf "\"%s\"", text }')
printf '{"artifactUpdate":{"artifact":{"name":"upper","parts":[{"text":%s}]},"lastChunk":true}}\n' "$text"

# 3. Exit status 0: the node completes the task.
