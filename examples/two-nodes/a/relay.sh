#!/bin/sh
# The program of the `relay` role: the message arrives on stdin. `mew send` run here goes
# through this node (it finds MEW_NODE_URL and MEW_TASK_TOKEN in its environment), so the
# task on b is a child of this turn's task.
set -eu
text=$(cat)
answer=$(mew send b/upper "$text")
echo "b says: $answer"
