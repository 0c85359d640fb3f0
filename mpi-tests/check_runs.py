"""Several checks in one Python start (importing torch and transformers costs
seconds each time): the arguments are the checks' argument lists separated by
"--"; each runs whatever the ones before gave, and prints "ok NAME" or
"FAILED NAME: why". The exit status is 1 when one failed, else 0."""
import sys


def run_checks(check, name_of, argv=None):
    """check(args) returns None (passed) or why it failed; name_of(args) names
    it in the lines printed. Returns the exit status."""
    checks = [[]]
    for a in sys.argv[1:] if argv is None else argv:
        if a == "--":
            checks.append([])
        else:
            checks[-1].append(a)
    failed = 0
    for args in checks:
        try:
            why = check(args)
        except Exception as e:  # this check fails; the next ones still run
            why = "%s: %s" % (type(e).__name__, e)
        print("ok %s" % name_of(args) if why is None else "FAILED %s: %s" % (name_of(args), why))
        failed += why is not None
    return 1 if failed else 0
