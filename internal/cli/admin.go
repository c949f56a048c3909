package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
	"github.com/cordon-project/cordon/internal/textsafe"
)

func gcCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Reclaim the residue of standalone runs whose owner is gone",
		Long: `Reclaim what a killed 'cordon run' left behind: processes, cgroups and the
leased UID/GID range — only for records in this state directory whose owner
process is provably gone (different boot, or its pid no longer has the
recorded start time). cgroups under cordon/ with no record here are listed as
unattributable and left alone: they may belong to another state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireRoot("gc"); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			defer st.Close()
			prov, err := g.newProvider(registry.Options{Store: st})
			if err != nil {
				return err
			}
			// A provider that leaves no residue has nothing to reclaim.
			var rep registry.ReclaimReport
			if rc, ok := prov.(registry.Reclaimer); ok {
				rep, err = rc.Reclaim(cmd.Context())
			}
			if asJSON {
				_ = writeJSON(g.stdout, rep)
			} else {
				fmt.Fprintf(g.stdout, "reclaimed: %d %v\nlive: %d\nunattributable cgroups (left alone): %d %v\n",
					len(rep.Reclaimed), rep.Reclaimed, len(rep.Live), len(rep.Unattributable), rep.Unattributable)
			}
			if err != nil {
				return failure.Fail(failure.KindProvision, "gc", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// DoctorReport is the --json output of cordon doctor.
type DoctorReport struct {
	Capability sandbox.Capability `json:"capability"`
	Probe      *ProbeResult       `json:"probe_sandbox,omitempty"`
	OK         bool               `json:"ok"`
}

// ProbeResult is what the probe sandbox proved.
type ProbeResult struct {
	LevelAdmitted   sandbox.Level       `json:"level_admitted"`
	EnforcementMode string              `json:"enforcement_mode"`
	Boundaries      map[string]bool     `json:"boundaries"`
	Failed          map[string][]string `json:"failed_facts,omitempty"`
	ExitCode        int                 `json:"exit_code"`
	Error           string              `json:"error,omitempty"`
}

func doctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Say what this host supports and prove it with a probe sandbox",
		Long: `Report what this host offers cordon — root, user namespaces, the cgroup
controllers and their versions, the Landlock ABI, seccomp — then build a probe
sandbox with every layer on, read its evidence, and run /bin/true in it. The
verdict is the probe's admitted level, not the feature list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.doctor(cmd.Context(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func (g *globals) doctor(ctx context.Context, asJSON bool) error {
	var rep DoctorReport
	var errs []string
	if err := requireRoot("doctor"); err != nil {
		return err
	}
	st, err := g.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	prov, err := g.newProvider(registry.Options{Store: st, Logger: g.logger(), CordonSHA256: binaryDigest(g.stateDir)})
	if err != nil {
		return err
	}
	rep.Capability, _ = prov.Probe(ctx)
	if len(rep.Capability.Missing) == 0 {
		rep.Probe = g.probeSandbox(ctx, prov)
		rep.OK = rep.Probe.LevelAdmitted == sandbox.DedicatedContainer && rep.Probe.ExitCode == 0
	} else {
		errs = append(errs, rep.Capability.Missing...)
	}
	if asJSON {
		_ = writeJSON(g.stdout, rep)
	} else {
		w := g.stdout
		c := rep.Capability
		fmt.Fprintf(w, "provider      %s v%s\n", c.Provider, c.Version)
		keys := make([]string, 0, len(c.Features))
		for k := range c.Features {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-22s %s\n", k, c.Features[k])
		}
		for _, m := range c.Missing {
			fmt.Fprintf(w, "  MISSING %s\n", m)
		}
		if p := rep.Probe; p != nil {
			fmt.Fprintf(w, "probe sandbox admitted %s (%s), /bin/true exited %d\n", p.LevelAdmitted, p.EnforcementMode, p.ExitCode)
			for _, b := range evidence.Boundaries() {
				mark := "verified"
				if !p.Boundaries[b] {
					mark = "NOT VERIFIED: " + strings.Join(p.Failed[b], "; ")
				}
				fmt.Fprintf(w, "  %-11s %s\n", b, textsafe.Line(mark))
			}
			if p.Error != "" {
				fmt.Fprintf(w, "  error: %s\n", textsafe.Line(p.Error))
			}
		}
		if rep.OK {
			fmt.Fprintln(w, "ok: this host can run sandboxes at DEDICATED_CONTAINER")
		}
	}
	if !rep.OK {
		return failure.Failf(failure.KindUnsupported, "doctor", "this host cannot evidence DEDICATED_CONTAINER %s", strings.Join(errs, "; "))
	}
	return nil
}

// probeSandbox builds a sandbox with every layer on and runs /bin/true.
func (g *globals) probeSandbox(ctx context.Context, prov sandbox.Provider) *ProbeResult {
	pr := &ProbeResult{Boundaries: map[string]bool{}, Failed: map[string][]string{}, ExitCode: -1}
	var out bytes.Buffer
	sb, err := prov.Provision(ctx, sandbox.Spec{Argv: []string{"/bin/true"}, Level: sandbox.DedicatedContainer, Workload: "doctor",
		Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 64, CPUs: 0.5, TmpBytes: 1 << 20}, Stdin: nil, Stdout: &out, Stderr: &out})
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	defer sb.Deprovision(context.WithoutCancel(ctx))
	adm, err := sb.Start(ctx)
	if rec := adm.Record; rec != nil {
		pr.LevelAdmitted, pr.EnforcementMode = rec.LevelAdmitted, rec.EnforcementMode
		for name, b := range rec.Boundaries {
			pr.Boundaries[name] = b.Verified
			for _, f := range b.Facts {
				if !f.OK {
					pr.Failed[name] = append(pr.Failed[name], fmt.Sprintf("%s: want %s, got %s", f.Name, f.Want, f.Got))
				}
			}
		}
	}
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	if err := sb.Exec(ctx); err != nil {
		pr.Error = err.Error()
		return pr
	}
	ex, err := sb.Wait(ctx)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	pr.ExitCode = ex.Code
	if ex.Signal != 0 {
		pr.ExitCode = 128 + ex.Signal
	}
	if out.Len() > 0 {
		fmt.Fprintf(os.Stderr, "probe output: %s\n", textsafe.Block(out.String()))
	}
	return pr
}
