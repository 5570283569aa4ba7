package main

// The scripts of bridge/demo/scripts.py, step for step: the same agents, the same
// `key=value` words, the same texts and artifact ids, so a test can hold a Task of this
// server to what the Python and JS servers send (tests/servers/test_go_agents.py checks it).

import (
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"
)

// The scripts this server hosts.
var scriptNames = []string{"writer", "asker", "sleeper"}

type stepKind int

const (
	stepStatus stepKind = iota
	stepChunk
	stepPause
)

// step is one thing a script does: a status (state, optional text), an artifact chunk,
// or a pause.
type step struct {
	kind       stepKind
	state      string // stepStatus: the script's state name ("working", "input-required", ...)
	text       string // stepStatus: the status message (when hasText); stepChunk: the chunk
	hasText    bool
	artifactID string
	name       string
	append     bool
	lastChunk  bool
	pause      time.Duration
}

func status(state string) step { return step{kind: stepStatus, state: state} }

func statusText(state, text string) step {
	return step{kind: stepStatus, state: state, text: text, hasText: true}
}

func chunk(id, text string, appendTo, last bool) step {
	return step{kind: stepChunk, artifactID: id, name: id, text: text, append: appendTo, lastChunk: last}
}

func pause(seconds float64) step {
	return step{kind: stepPause, pause: time.Duration(seconds * float64(time.Second))}
}

// params are the `key=value` words of a message text (scripts.params).
func params(text string) map[string]string {
	out := map[string]string{}
	for _, word := range strings.Fields(text) {
		key, value, found := strings.Cut(word, "=")
		if found && key != "" {
			out[key] = value
		}
	}
	return out
}

// num is a parameter as a number, or fallback when it is missing or no finite number
// (Python's float() would raise on what Go cannot parse either).
func num(p map[string]string, key string, fallback float64) float64 {
	raw, ok := p[key]
	if !ok {
		return fallback
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fallback
	}
	return v
}

// whole truncates toward zero, as Python's int() of a float does.
func whole(v float64) int { return int(math.Trunc(v)) }

// chunkText is chunk i (0-based) of n: distinct, ordered, easy to check; padded with "é"
// to size characters.
func chunkText(i, n, size int) string {
	text := fmt.Sprintf("[%d/%d] lorem ipsum dolor sit amet %05d\n", i+1, n, i*7919%10007)
	return text + strings.Repeat("é", max(0, size-len(text))) // text is ASCII: bytes are characters
}

// run yields the steps of agent for a user message; turn counts the Task's earlier user messages.
func run(agent, text string, turn int) iter.Seq[step] {
	p := params(text)
	interval := num(p, "interval", 0.05)
	return func(yield func(step) bool) {
		emit := func(steps ...step) bool {
			for _, s := range steps {
				if !yield(s) {
					return false
				}
			}
			return true
		}
		switch {
		case agent == "writer":
			n := max(1, whole(num(p, "chunks", 5)))
			size := whole(num(p, "size", 0))
			statusSize := whole(num(p, "status_size", 0))
			if !emit(statusText("working", "writing"+strings.Repeat("s", max(0, statusSize-len("writing"))))) {
				return
			}
			for i := range n {
				if !emit(pause(interval), chunk("result", chunkText(i, n, size), i > 0, i == n-1)) {
					return
				}
			}
			emit(status("completed"))
		case agent == "asker" && hasKey(p, "auth"):
			emit(
				statusText("working", "thinking"),
				pause(interval),
				statusText("auth-required", "Sign in to the report store to continue"),
				pause(num(p, "auth", 1.0)),
				statusText("working", "signed in"),
				pause(interval),
				chunk("answer", "stored after sign-in", false, true),
				status("completed"),
			)
		case agent == "asker" && turn == 0:
			emit(
				statusText("working", "thinking"),
				pause(interval),
				statusText("input-required", "Which format do you want? Options: json, csv"),
			)
		case agent == "asker":
			emit(
				statusText("working", "formatting"),
				pause(interval),
				chunk("answer", "you chose: "+text, false, true),
				status("completed"),
			)
		case agent == "sleeper":
			ticks := whole(num(p, "ticks", 20))
			every := num(p, "interval", 0.5)
			if !emit(statusText("working", "starting")) {
				return
			}
			for i := range max(0, ticks) {
				if !emit(pause(every), statusText("working", fmt.Sprintf("tick %d/%d", i+1, ticks))) {
					return
				}
			}
			emit(status("completed"))
		default:
			panic("no script " + agent)
		}
	}
}

func hasKey(p map[string]string, key string) bool {
	_, ok := p[key]
	return ok
}
