"""The lab's parts, each as it runs natively on loopback (and the compose stack as a whole).

Every module here starts its part with `processes.Service` and renders the repository's own
config files for it; none starts anything by itself: the stack (`stack.py`) decides.
"""
