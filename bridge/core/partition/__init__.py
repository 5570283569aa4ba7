"""The rules of one owned commands partition, pure: which command offsets are
absorbed and which offset commits (:mod:`.offsets`), which commands wait for room
(:mod:`.intake`), how long a closed Task is remembered (:mod:`.retention`), when the
partition commits (:mod:`.ticks`), what fits each topic (:mod:`.budgets`), what a
failed transaction means (:mod:`.txn_failure`), and what an open does with what the
last transaction left open (:mod:`.left_open`)."""
