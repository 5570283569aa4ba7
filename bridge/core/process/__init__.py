"""The rules of the whole process, pure: whether a new start may come in and how
fast restored Tasks reconnect (:mod:`.capacity`), and what a fenced producer means
(:mod:`.fencing`)."""
