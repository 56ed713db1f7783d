# Prepended to every bash script of tests/escape/ by tests/all/escape/script.rs, after what the
# harness knows as variables (`ARG_name='value'`, lists space-separated). The twin of
# _prelude.py: every forbidden step goes through `attempt`, which prints `ATTEMPT <label>` and
# then exactly one outcome line:
#
#     REFUSED rc=<code> <what it said>   the step failed the way the sandbox says no
#     GOT <label> -> <what it printed>   the step worked: the attack got through
#     BROKEN rc=<code> <what it said>    anything else: the script failed for another reason

# say WORDS...: a line on stdout. Not `echo`: the harness's catalog has a tool named `echo`,
# and a bash run's tool functions shadow builtins of the same name.
say() {
    builtin printf '%s\n' "$*"
}

# The run's own pid (1: its PID namespace's) and its directory, by which the harness finds it.
say "PID $$"
say "SCRATCH $PWD"

# attempt LABEL REFUSAL COMMAND [ARG...]: runs COMMAND; a failure whose output matches REFUSAL
# (an extended regular expression: "Operation not permitted|No such process") is a refusal.
attempt() {
    local label=$1 refusal=$2 out rc
    shift 2
    say "ATTEMPT $label"
    out=$("$@" 2>&1)
    rc=$?
    out=${out//$'\n'/ | }
    if [ "$rc" -eq 0 ]; then
        say "GOT $label -> ${out:0:400}"
    elif [[ $out =~ $refusal ]]; then
        say "REFUSED rc=$rc ${out:0:200}"
    else
        say "BROKEN rc=$rc ${out:0:400}"
    fi
}

# checkpoint [ROLE]: waits while the harness looks at this run's processes from outside (the
# tool `park`, held meanwhile; ROLE "victim" stays parked until the harness lets it go).
checkpoint() {
    park "{\"pid\": $$, \"dir\": \"$PWD\", \"role\": \"${1:-checkpoint}\"}" >/dev/null
}

checkpoint
