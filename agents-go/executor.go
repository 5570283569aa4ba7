package main

import (
	"context"
	"iter"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// scripted runs one script of scripts.go as an A2A agent: its steps become the SDK's events.
type scripted struct {
	script string
}

var _ a2asrv.AgentExecutor = (*scripted)(nil)

// Execute emits the Task first when the message starts one (with the message in its
// history, as the Python and JS servers do), then the script's steps. A paused step ends
// early when ctx is done: the SDK cancels it once a cancel has ended the Task.
func (s *scripted) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		turn := 0
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		} else {
			turn = earlierUserMessages(ec.StoredTask, ec.Message)
		}
		for st := range run(s.script, userText(ec.Message), turn) {
			var event a2a.Event
			switch st.kind {
			case stepPause:
				timer := time.NewTimer(st.pause)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
				continue
			case stepStatus:
				var msg *a2a.Message
				if st.hasText {
					msg = agentMessage(ec, st.text)
				}
				event = a2a.NewStatusUpdateEvent(ec, taskState(st.state), msg)
			case stepChunk:
				event = &a2a.TaskArtifactUpdateEvent{
					TaskID:    ec.TaskID,
					ContextID: ec.ContextID,
					Append:    st.append,
					LastChunk: st.lastChunk,
					Artifact:  &a2a.Artifact{ID: a2a.ArtifactID(st.artifactID), Name: st.name, Parts: a2a.ContentParts{a2a.NewTextPart(st.text)}},
				}
			}
			if !yield(event, nil) {
				return
			}
		}
	}
}

// Cancel ends the Task canceled, with a message saying so (the other servers' words).
func (s *scripted) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, agentMessage(ec, "canceled on request")), nil)
	}
}

func agentMessage(ec *a2asrv.ExecutorContext, text string) *a2a.Message {
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(text))
}

// taskState is the SDK's state for a script's state name ("input-required" ->
// TASK_STATE_INPUT_REQUIRED).
func taskState(name string) a2a.TaskState {
	return a2a.TaskState("TASK_STATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
}

// userText joins the message's text parts with spaces (the a2a-sdk's get_user_input(" ")).
func userText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var texts []string
	for _, part := range m.Parts {
		if t, ok := part.Content.(a2a.Text); ok {
			texts = append(texts, string(t))
		}
	}
	return strings.Join(texts, " ")
}

// earlierUserMessages is the script's turn: the user messages of the Task before this one
// (the SDK has already added this one to the stored history).
func earlierUserMessages(task *a2a.Task, current *a2a.Message) int {
	n := 0
	for _, m := range task.History {
		if m != nil && m.Role == a2a.MessageRoleUser && (current == nil || m.ID != current.ID) {
			n++
		}
	}
	return n
}
