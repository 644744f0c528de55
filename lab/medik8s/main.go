// The medik8s node-maintenance-operator, run out of cluster by the lab.
//
// This is upstream's main.go (github.com/medik8s/node-maintenance-operator, main.go at
// the version in the build's go.mod) with what a Deployment would give it turned into
// flags: where the webhook serves and finds its certificate (upstream: :9443 and the
// certificates OLM mounts at /apiserver.local.config/certificates), the metrics and
// probe addresses (upstream :8080 and :8081; fixed ports would collide when several labs
// share a machine) and the leader-election namespace (in a pod it is read from the
// service account's mount). The manager, the lease manager, the OpenShift check, the
// NodeMaintenanceReconciler and the validating webhook are upstream's, unchanged.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/medik8s/common/pkg/lease"
	"go.uber.org/zap/zapcore"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	nodemaintenancev1beta1 "github.com/medik8s/node-maintenance-operator/api/v1beta1"
	"github.com/medik8s/node-maintenance-operator/controllers"
	"github.com/medik8s/node-maintenance-operator/pkg/utils"
	"github.com/medik8s/node-maintenance-operator/version"
)

// leaderElectionID is upstream's (main.go).
const leaderElectionID = "135b1886.medik8s.io"

var (
	scheme   = k8sruntime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(nodemaintenancev1beta1.AddToScheme(scheme))
}

type leaseManagerInitializer struct {
	cl client.Client
	lease.Manager
}

func (ls *leaseManagerInitializer) Start(context.Context) error {
	var err error
	ls.Manager, err = lease.NewManager(ls.cl, controllers.LeaseHolderIdentity)
	return err
}

func main() {
	var (
		metricsAddr, probeAddr, leaderElectionNamespace string
		webhookHost, webhookCertDir, userAgent          string
		webhookPort                                     int
		enableLeaderElection, enableHTTP2               bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metric endpoint binds to (0: off).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "The address the probe endpoint binds to (0: off).")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for controller manager.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "If HTTP/2 should be enabled for the webhook server.")
	flag.StringVar(&webhookHost, "webhook-host", "127.0.0.1", "The address the validating webhook binds to.")
	flag.IntVar(&webhookPort, "webhook-port", 0, "The port the validating webhook serves on (0: no webhook).")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "", "Directory with the webhook's tls.crt and tls.key.")
	flag.StringVar(&userAgent, "user-agent", "node-maintenance-operator/"+version.Version, "User agent towards the apiserver.")

	opts := zap.Options{Development: true, TimeEncoder: zapcore.RFC3339NanoTimeEncoder}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	setupLog.Info(fmt.Sprintf("Go Version: %s", runtime.Version()))
	setupLog.Info(fmt.Sprintf("Operator Version: %s", version.Version))

	webhookOpts := webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir}
	if !enableHTTP2 {
		// Upstream disables HTTP/2 for the webhook server (CVE mitigation).
		webhookOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}

	config := ctrl.GetConfigOrDie()
	config.UserAgent = userAgent
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:           webhook.NewServer(webhookOpts),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}

	cl := mgr.GetClient()
	leases := &leaseManagerInitializer{cl: cl}
	if err := mgr.Add(leases); err != nil {
		setupLog.Error(err, "unable to set up lease Manager", "lease", "NodeMaintenance")
		os.Exit(1)
	}

	openshiftCheck, err := utils.NewOpenshiftValidator(mgr.GetConfig())
	if err != nil {
		setupLog.Error(err, "failed to check if we run on Openshift")
		os.Exit(1)
	}
	isOpenShift := openshiftCheck.IsOpenshiftSupported()

	if err = (&controllers.NodeMaintenanceReconciler{
		Client:       cl,
		Scheme:       mgr.GetScheme(),
		LeaseManager: leases,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "NodeMaintenance")
		os.Exit(1)
	}
	if webhookPort != 0 {
		if err = (&nodemaintenancev1beta1.NodeMaintenance{}).SetupWebhookWithManager(isOpenShift, mgr); err != nil {
			setupLog.Error(err, "unable to create webhook", "webhook", "NodeMaintenance")
			os.Exit(1)
		}
	}

	if probeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			setupLog.Error(err, "unable to set up health check")
			os.Exit(1)
		}
		if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
			setupLog.Error(err, "unable to set up ready check")
			os.Exit(1)
		}
	}

	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}
