"""The lab's stand-ins for what cannot run here: virt-handler, HCO, storage, the legacy
NodeMaintenance group and Metal3's BareMetalHost."""
