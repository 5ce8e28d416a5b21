# `make help`: reads the makefiles named on the command line (Makefile, mk/*.mk) and
# prints a `##@ Heading` line as the start of a group and `target: prereqs ## text` as
# one line of it, in the order they are written. Every .PHONY target must have such a
# line: the ones without are named on stderr and the exit status is 1, so a new target
# cannot be left out of the list unnoticed.

/^##@ / {
    n++
    heading[n] = substr($0, 5)
    next
}

/^\.PHONY:/ {
    for (i = 2; i <= NF; i++)
        phony[$i] = 1
    next
}

# A rule, not a `NAME := value` assignment, with its text after the last `## `.
/^[A-Za-z0-9_.-]+:([^=]|$).*## / {
    n++
    name[n] = substr($0, 1, index($0, ":") - 1)
    text[n] = $0
    sub(/.*## /, "", text[n])
    documented[name[n]] = 1
    if (length(name[n]) > width)
        width = length(name[n])
}

END {
    for (i = 1; i <= n; i++) {
        if (i in heading)
            printf "%s%s\n", (i > 1 ? "\n" : ""), heading[i]
        else
            printf "  %-" width "s  %s\n", name[i], text[i]
    }
    for (target in phony)
        if (!(target in documented))
            missing = missing " " target
    if (missing != "") {
        print "make help: no `## ` text for .PHONY target(s):" missing > "/dev/stderr"
        exit 1
    }
}
