// Command kubevirt-manifests prints, as one JSON list, the cluster objects virt-operator
// would install for this KubeVirt version: every CRD, the virt-api webhook configurations
// and APIServices, the priority class and the RBAC of virt-api, virt-controller, virt-handler
// and the cluster roles. It calls virt-operator's own generators
// (pkg/virt-operator/resource/generate/{components,rbac}), so nothing is hand-written;
// the lab then points the webhooks and the APIService at its local virt-api.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
)

func main() {
	namespace := "kubevirt"
	if len(os.Args) > 1 {
		namespace = os.Args[1]
	}
	var objects []interface{}
	// The same list virt-operator installs (install/strategy.go, GenerateCurrentInstallStrategy),
	// read from that file of this release when the build writes crds_list.go, plus the KubeVirt CRD.
	crdFuncs := append(installedCRDs(), components.NewKubeVirtCrd)
	for _, newCrd := range crdFuncs {
		crd, err := newCrd()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubevirt-manifests:", err)
			os.Exit(1)
		}
		crd.TypeMeta.APIVersion = "apiextensions.k8s.io/v1"
		crd.TypeMeta.Kind = "CustomResourceDefinition"
		objects = append(objects, crd)
	}
	objects = append(objects, components.NewKubeVirtPriorityClassCR())
	objects = append(objects, components.NewVirtAPIMutatingWebhookConfiguration(namespace))
	objects = append(objects, components.NewVirtAPIValidatingWebhookConfiguration(namespace))
	for _, apiService := range components.NewVirtAPIAPIServices(namespace) {
		objects = append(objects, apiService)
	}
	for _, object := range rbac.GetAllCluster() {
		objects = append(objects, object)
	}
	for _, object := range rbac.GetAllApiServer(namespace) {
		objects = append(objects, object)
	}
	for _, object := range controllerRBAC(namespace) {
		objects = append(objects, object)
	}
	// virt-handler's identity: the lab's virt-handler stand-in acts with these rights.
	for _, object := range rbac.GetAllHandler(namespace) {
		objects = append(objects, object)
	}
	encoder := json.NewEncoder(os.Stdout)
	if err := encoder.Encode(objects); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-manifests:", err)
		os.Exit(1)
	}
}
