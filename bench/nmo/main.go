// The medik8s node-maintenance-operator's controller, run out of cluster for the benchmarks.
//
// Upstream's main.go also serves metrics on :8080, probes on :8081 and an admission
// webhook on :9443 (certificates injected by OLM); none of that changes how a
// NodeMaintenance is carried out, and fixed ports would collide on a shared machine.
// This main builds the same manager with those servers off and registers the upstream
// NodeMaintenanceReconciler unchanged (the same drainer, lease manager and status updates).
package main

import (
	"context"
	"flag"
	"os"

	"github.com/medik8s/common/pkg/lease"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nodemaintenancev1beta1 "github.com/medik8s/node-maintenance-operator/api/v1beta1"
	"github.com/medik8s/node-maintenance-operator/controllers"
)

// UserAgent names this client in the apiserver's audit log.
const UserAgent = "node-maintenance-operator/v0.17.0"

type leaseManagerInitializer struct {
	cl client.Client
	lease.Manager
}

func (l *leaseManagerInitializer) Start(context.Context) error {
	var err error
	l.Manager, err = lease.NewManager(l.cl, controllers.LeaseHolderIdentity)
	return err
}

func main() {
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(nodemaintenancev1beta1.AddToScheme(scheme))

	config := ctrl.GetConfigOrDie()
	config.UserAgent = UserAgent
	// client-go's defaults (5 qps, burst 10) are what the operator runs with upstream.
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}
	leases := &leaseManagerInitializer{cl: mgr.GetClient()}
	if err := mgr.Add(leases); err != nil {
		log.Error(err, "unable to add the lease manager")
		os.Exit(1)
	}
	if err := (&controllers.NodeMaintenanceReconciler{
		Client:       mgr.GetClient(),
		Scheme:       mgr.GetScheme(),
		LeaseManager: leases,
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "unable to create the NodeMaintenance controller")
		os.Exit(1)
	}
	log.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
