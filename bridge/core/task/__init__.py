"""The rules of one Task, pure: its lifecycle and what each update does to it
(:mod:`.lifecycle`), what a command does to it (:mod:`.commands`), how its runner
follows it (:mod:`.follow`) and resumes it (:mod:`.resume`), what a failed call
becomes (:mod:`.policy`), how large artifact parts are spread (:mod:`.artifacts`),
and its push route and token (:mod:`.push`)."""
