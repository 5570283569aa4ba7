// Command agents-go hosts the demo agents writer, asker and sleeper of
// bridge/demo/scripts.py on the a2a-go v2 SDK's server: a third, independent A2A
// implementation for the bridge's tests, beside the a2a-sdk (Python) and @a2a-js/sdk ones.
//
// The layout is bridge/demo/sdk_agents.py's, each agent with a handler and task store of
// its own:
//
//	/agents/<name>        JSON-RPC (A2A v1.0); card offers JSONRPC
//	/agents/<name>-rest   card offers HTTP+JSON only, served at /agents/<name>-rest/rest
//	/agents/<name>-grpc   card offers GRPC only, served on a port of its own
//	/agents/writer-all    card offers GRPC, HTTP+JSON, then JSONRPC
//
// Each card is at <agent URL>/.well-known/agent-card.json with v1.0 supportedInterfaces.
// Every agent also answers JSON-RPC at its URL and HTTP+JSON under <URL>/rest whatever its
// card offers, so a test can read a Task back (GetTask) from the same task store.
// The gRPC agents are hosted only with --grpc-port: each on a port of its own from
// that one on, or each on a free port with --grpc-port 0.
//
// POST /_control/drop {"agent": name} cuts that agent's open connections (drop.go).
//
// Run: agents-go --host 127.0.0.1 --port 18097 --grpc-port 0
// It prints "go agents listening on http://host:port" once it serves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/grpc"
)

const (
	agentsPrefix = "/agents"
	restPath     = "/rest"
)

// hosted is one agent of the server: its URL name, its script and the bindings its card
// offers, in its order of preference (the card's names).
type hosted struct {
	name     string
	script   string
	bindings []a2a.TransportProtocol
}

var (
	jsonrpcOnly = []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC}
	restOnly    = []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON}
	grpcOnly    = []a2a.TransportProtocol{a2a.TransportProtocolGRPC}
	all         = []a2a.TransportProtocol{a2a.TransportProtocolGRPC, a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolJSONRPC}
)

func agents() []hosted {
	var out []hosted
	for _, suffix := range []struct {
		tail     string
		bindings []a2a.TransportProtocol
	}{{"", jsonrpcOnly}, {"-rest", restOnly}, {"-grpc", grpcOnly}} {
		for _, script := range scriptNames {
			out = append(out, hosted{script + suffix.tail, script, suffix.bindings})
		}
	}
	return append(out, hosted{"writer-all", "writer", all})
}

var descriptions = map[string]string{
	"writer":  "Writes `chunks` chunks (append/lastChunk) of one artifact, then completes.",
	"asker":   "Asks a question (input-required); the follow-up answer completes the task.",
	"sleeper": "Ticks `ticks` times every `interval` seconds; the one to cancel.",
}

func (h hosted) offersGRPC() bool { return slices.Contains(h.bindings, a2a.TransportProtocolGRPC) }

// card is the agent's card: the interfaces of its bindings at their URLs.
func (h hosted) card(url, grpcURL string) *a2a.AgentCard {
	var interfaces []*a2a.AgentInterface
	for _, b := range h.bindings {
		switch b {
		case a2a.TransportProtocolJSONRPC:
			interfaces = append(interfaces, a2a.NewAgentInterface(url, b))
		case a2a.TransportProtocolHTTPJSON:
			interfaces = append(interfaces, a2a.NewAgentInterface(url+restPath, b))
		case a2a.TransportProtocolGRPC:
			interfaces = append(interfaces, a2a.NewAgentInterface(grpcURL, b))
		}
	}
	description := descriptions[h.script]
	return &a2a.AgentCard{
		Name:                h.name,
		Description:         description + " (bridge/demo/scripts.py on the a2a-go SDK)",
		Version:             "1.0.0",
		SupportedInterfaces: interfaces,
		Capabilities:        a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:   []string{"text/plain"},
		DefaultOutputModes:  []string{"text/plain"},
		Skills: []a2a.AgentSkill{{
			ID:          h.name,
			Name:        h.name,
			Description: description,
			Tags:        []string{"demo", "scripted"},
			Examples:    []string{"chunks=5 interval=0.05"},
		}},
	}
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func main() {
	host := flag.String("host", "127.0.0.1", "the address to listen on")
	port := flag.Int("port", 18097, "the HTTP port (0: a free one)")
	grpcPort := flag.Int("grpc-port", -1, "serve the agents offering gRPC, each on a port of its own from this one on (0: each on a free port); without it they are not hosted")
	flag.Parse()
	// The SDK logs through slog: warnings and errors only, on stderr.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := serve(*host, *port, *grpcPort); err != nil {
		log.Fatalf("go agents: %v", err)
	}
}

func serve(host string, port, grpcPort int) error {
	httpListener, err := net.Listen("tcp", hostPort(host, port))
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", hostPort(host, port), err)
	}
	baseURL := "http://" + hostPort(host, httpListener.Addr().(*net.TCPAddr).Port)

	mux := http.NewServeMux()
	cutters := map[string]*cutter{}
	var grpcServers []*grpc.Server
	var grpcLines []string
	next := grpcPort
	for _, agent := range agents() {
		var grpcListener net.Listener
		grpcURL := ""
		if agent.offersGRPC() {
			if grpcPort < 0 {
				continue // not hosted without --grpc-port
			}
			if grpcListener, err = net.Listen("tcp", hostPort(host, next)); err != nil {
				return fmt.Errorf("cannot listen for %s's gRPC on %s: %w", agent.name, hostPort(host, next), err)
			}
			if grpcPort > 0 {
				next++
			}
			grpcURL = "grpc://" + hostPort(host, grpcListener.Addr().(*net.TCPAddr).Port)
		}
		url := baseURL + agentsPrefix + "/" + agent.name
		card := agent.card(url, grpcURL)
		handler := a2asrv.NewHandler(&scripted{script: agent.script}, a2asrv.WithExtendedAgentCard(card))
		cut := newCutter()
		cutters[agent.name] = cut
		path := agentsPrefix + "/" + agent.name
		mux.Handle(path, cut.track(a2asrv.NewJSONRPCHandler(handler)))
		mux.Handle(path+restPath+"/", cut.track(http.StripPrefix(path+restPath, a2asrv.NewRESTHandler(handler))))
		mux.Handle(path+a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
		if grpcListener != nil {
			server := grpc.NewServer(grpc.StreamInterceptor(cut.streamCounter))
			a2agrpc.NewHandler(handler).RegisterWith(server)
			grpcServers = append(grpcServers, server)
			go func() { _ = server.Serve(listener{grpcListener, cut}) }()
			grpcLines = append(grpcLines, fmt.Sprintf("go agent %s serving gRPC on %s", agent.name, grpcURL))
		}
	}
	mux.Handle("/_control/drop", dropHandler(cutters))

	server := &http.Server{Handler: mux, ConnContext: withConn, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(httpListener) }()
	fmt.Printf("go agents listening on %s\n", baseURL)
	for _, line := range grpcLines {
		fmt.Println(line)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-served:
		return err
	case <-stop:
	}
	// Open streams would hold a graceful shutdown for as long as their Tasks run: a short grace.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range grpcServers {
		s.Stop()
	}
	if err := server.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
