package testserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds the wait for a started server to answer PING / version.
	readyTimeout = 10 * time.Second
	// probeTimeout bounds one readiness probe.
	probeTimeout = time.Second
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// bindAttempts is how many ports are tried when a server fails to bind (port race).
	bindAttempts = 5
)

// Server is one server process (redis-server, a sentinel or memcached) started by this
// package. Addr and Port stay the same across Restart; PID changes.
//
// Methods are safe for concurrent use.
type Server struct {
	Kind    string // "redis", "redis-cluster", "redis-sentinel" or "memcached"
	Addr    string // "127.0.0.1:port"
	Port    int
	Dir     string // working directory: data, config and log files
	LogPath string // the server's stdout+stderr

	bin     string
	args    []string
	probe   func(addr string, timeout time.Duration) error
	stopSig syscall.Signal // graceful stop signal
	ownDir  bool           // Dir was created for this server alone and is removed by Stop

	mu     sync.Mutex
	proc   *process // nil when not running
	closed bool     // Stop was called
}

type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed when the process has exited and been reaped
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// serverSpec says how to start one kind of server.
type serverSpec struct {
	kind string
	bin  string // binary name, looked up on PATH
	bus  bool   // port+10000 must be free too (Redis Cluster bus)
	// dir is the working directory. If empty, a temporary directory is created and removed
	// by Stop.
	dir string
	// args returns the command line for port; it may write config files into dir.
	args  func(dir string, port int) ([]string, error)
	probe func(addr string, timeout time.Duration) error
	// stopSig is the graceful stop signal; SIGTERM if zero.
	stopSig syscall.Signal
}

// startServer starts a server on a free port and waits until it answers. If the server
// fails to bind (another process took the port meanwhile) it retries on another port.
func startServer(spec serverSpec) (*Server, error) {
	bin, err := lookBinary(spec.bin)
	if err != nil {
		return nil, err
	}
	dir, ownDir := spec.dir, false
	if dir == "" {
		dir, err = os.MkdirTemp("", "floodgate-"+spec.kind+"-")
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		ownDir = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	var lastErr error
	for range bindAttempts {
		port, err := freePort(spec.bus)
		if err != nil {
			lastErr = err
			break
		}
		args, err := spec.args(dir, port)
		if err != nil {
			lastErr = err
			break
		}
		s := &Server{
			Kind:    spec.kind,
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Port:    port,
			Dir:     dir,
			LogPath: filepath.Join(dir, spec.kind+".log"),
			bin:     bin,
			args:    args,
			probe:   spec.probe,
			stopSig: spec.stopSig,
			ownDir:  ownDir,
		}
		if s.stopSig == 0 {
			s.stopSig = syscall.SIGTERM
		}
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
		// Port race: try again on another port, with a fresh log.
		os.Remove(s.LogPath)
	}
	if ownDir {
		os.RemoveAll(dir)
	}
	return nil, lastErr
}

// startLocked launches the process and waits until it is ready. On failure the process is
// killed and the error includes the server's log.
func (s *Server) startLocked() error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	fmt.Fprintf(logf, "### testserver: starting %s %s\n", s.bin, strings.Join(quoteArgs(s.args), " "))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("testserver: start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	deadline := time.Now().Add(readyTimeout)
	for {
		if p.exited() {
			s.proc = nil
			return s.failure(fmt.Sprintf("exited during startup (%v)", cmd.ProcessState))
		}
		perr := s.probe(s.Addr, probeTimeout)
		if perr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stopLocked(syscall.SIGKILL, 0)
			return s.failure(fmt.Sprintf("not ready after %v: %v", readyTimeout, perr))
		}
		select {
		case <-p.done:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// failure builds an error carrying the tail of the server's log.
func (s *Server) failure(what string) error {
	return fmt.Errorf("testserver: %s on %s %s\n--- %s ---\n%s--- end of log ---",
		s.Kind, s.Addr, what, s.LogPath, s.logTail(16<<10))
}

func (s *Server) logTail(max int64) string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)\n", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	out := string(b)
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}

// Log returns the server's log (stdout and stderr) so far, up to its last 64 KiB.
func (s *Server) Log() string { return s.logTail(64 << 10) }

// stopLocked signals the process and waits for it to exit, escalating to SIGKILL after
// grace. Any process left in its process group (e.g. a redis fork child) is killed too.
func (s *Server) stopLocked(sig syscall.Signal, grace time.Duration) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if !p.exited() {
		syscall.Kill(p.pid, sig)
		syscall.Kill(p.pid, syscall.SIGCONT) // in case it was paused
		if sig != syscall.SIGKILL {
			select {
			case <-p.done:
			case <-time.After(grace):
			}
		}
	}
	if !p.exited() {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testserver: %s pid %d did not exit after SIGKILL", s.Kind, p.pid)
	}
	// The process was a group leader (Setpgid): sweep the group.
	syscall.Kill(-p.pid, syscall.SIGKILL)
	return nil
}

// PID returns the process id of the running server, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.pid
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool { return s.PID() != 0 }

// Stop stops the server (SIGTERM, then SIGKILL after a grace period; memcached, which has
// nothing to save and takes a second to exit on SIGTERM, is killed at once) and removes its
// temporary directory. It is final (Restart fails afterwards) and idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked(s.stopSig, stopGrace)
	if !s.closed && s.ownDir {
		os.RemoveAll(s.Dir)
	}
	s.closed = true
	return err
}

// Kill kills the server with SIGKILL, as an outage would, and waits until it is gone.
// Its files are kept; Restart brings it back on the same port.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL, 0)
}

// Shutdown stops the server gracefully (SIGTERM; memcached: SIGKILL) and keeps its files; Restart brings it
// back on the same port.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(s.stopSig, stopGrace)
}

// Restart stops the server if it is running (SIGTERM) and starts it again on the same
// port with the same files and arguments, waiting until it answers.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testserver: %s on %s: Restart after Stop", s.Kind, s.Addr)
	}
	if err := s.stopLocked(s.stopSig, stopGrace); err != nil {
		return err
	}
	return s.startLocked()
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing is answered,
// as with a hung server or a network partition. Resume undoes it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return fmt.Errorf("testserver: %s on %s is not running", s.Kind, s.Addr)
	}
	return syscall.Kill(s.proc.pid, sig)
}

// String returns "kind addr pid N".
func (s *Server) String() string {
	return fmt.Sprintf("%s %s pid %d", s.Kind, s.Addr, s.PID())
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}

// stopAll stops servers concurrently and returns the first error.
func stopAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Stop()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
