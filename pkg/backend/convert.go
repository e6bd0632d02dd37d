package backend

import (
	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Conversions between the Go contract and its wire form. FromProto functions
// accept nil (the getters of generated messages are nil-safe), so no input
// from the other side of the connection can make them panic. Empty slices
// become nil both ways.

func infoToProto(i Info) *pb.Info {
	return &pb.Info{Name: i.Name, Version: i.Version, ApiVersions: nonEmpty(i.APIVersions), Description: i.Description}
}

func infoFromProto(i *pb.Info) Info {
	return Info{Name: i.GetName(), Version: i.GetVersion(), APIVersions: nonEmpty(i.GetApiVersions()), Description: i.GetDescription()}
}

func configToProto(c Config) *pb.Config {
	return &pb.Config{ApiVersion: c.APIVersion, SysfsRoot: c.SysFSRoot, Simulate: c.Simulate, StateDir: c.StateDir, Nvml: string(c.NVML), Installation: c.Installation}
}

func configFromProto(c *pb.Config) Config {
	return Config{APIVersion: c.GetApiVersion(), SysFSRoot: c.GetSysfsRoot(), Simulate: c.GetSimulate(), StateDir: c.GetStateDir(), NVML: NVMLMode(c.GetNvml()), Installation: c.GetInstallation()}
}

func inventoryToProto(i Inventory) *pb.Inventory {
	return &pb.Inventory{
		Backend:   i.Backend,
		Host:      i.Host,
		Simulated: i.Simulated,
		Notes:     nonEmpty(i.Notes),
		Gpus:      convert(i.GPUs, gpuToProto),
		Devices:   convert(i.Devices, deviceToProto),
		Driver:    driverToProto(i.Driver),
	}
}

func driverToProto(d *Driver) *pb.Driver {
	if d == nil {
		return nil
	}
	return &pb.Driver{Version: d.Version, VgpuMin: d.VGPUMin, VgpuMax: d.VGPUMax}
}

func driverFromProto(d *pb.Driver) *Driver {
	if d == nil {
		return nil
	}
	return &Driver{Version: d.GetVersion(), VGPUMin: d.GetVgpuMin(), VGPUMax: d.GetVgpuMax()}
}

func inventoryFromProto(i *pb.Inventory) Inventory {
	return Inventory{
		Backend:   i.GetBackend(),
		Host:      i.GetHost(),
		Simulated: i.GetSimulated(),
		Notes:     nonEmpty(i.GetNotes()),
		GPUs:      convert(i.GetGpus(), gpuFromProto),
		Devices:   convert(i.GetDevices(), deviceFromProto),
		Driver:    driverFromProto(i.GetDriver()),
	}
}

func gpuToProto(g GPU) *pb.GPU {
	return &pb.GPU{
		Address:      g.Address,
		Model:        g.Model,
		DeviceId:     g.DeviceID,
		Memory:       g.Memory,
		NumaNode:     int64(g.NUMANode),
		Driver:       g.Driver,
		Mode:         string(g.Mode),
		Interface:    g.Interface,
		IommuGroup:   g.IOMMUGroup,
		GroupDevices: nonEmpty(g.GroupDevices),
		MigCapable:   g.MIGCapable,
		MigEnabled:   g.MIGEnabled,
		MixedSize:    g.MixedSize,
		VgpuTypes:    convert(g.VGPUTypes, vgpuTypeToProto),
		MigProfiles:  convert(g.MIGProfiles, migProfileToProto),
		Unavailable:  g.Unavailable,
	}
}

func gpuFromProto(g *pb.GPU) GPU {
	return GPU{
		Address:      g.GetAddress(),
		Model:        g.GetModel(),
		DeviceID:     g.GetDeviceId(),
		Memory:       g.GetMemory(),
		NUMANode:     int(g.GetNumaNode()),
		Driver:       g.GetDriver(),
		Mode:         gpu.Mode(g.GetMode()),
		Interface:    g.GetInterface(),
		IOMMUGroup:   g.GetIommuGroup(),
		GroupDevices: nonEmpty(g.GetGroupDevices()),
		MIGCapable:   g.GetMigCapable(),
		MIGEnabled:   g.GetMigEnabled(),
		MixedSize:    g.GetMixedSize(),
		VGPUTypes:    convert(g.GetVgpuTypes(), vgpuTypeFromProto),
		MIGProfiles:  convert(g.GetMigProfiles(), migProfileFromProto),
		Unavailable:  g.GetUnavailable(),
	}
}

func vgpuTypeToProto(t VGPUType) *pb.VGPUType {
	return &pb.VGPUType{
		Name:         t.Name,
		Id:           t.ID,
		Memory:       t.Memory,
		MaxInstances: int64(t.MaxInstances),
		Available:    int64(t.Available),
		MigProfile:   t.MIGProfile,
	}
}

func vgpuTypeFromProto(t *pb.VGPUType) VGPUType {
	return VGPUType{
		Name:         t.GetName(),
		ID:           t.GetId(),
		Memory:       t.GetMemory(),
		MaxInstances: int(t.GetMaxInstances()),
		Available:    int(t.GetAvailable()),
		MIGProfile:   t.GetMigProfile(),
	}
}

func migProfileToProto(p MIGProfile) *pb.MIGProfile {
	return &pb.MIGProfile{
		Name:       p.Name,
		Id:         int64(p.ID),
		Slices:     int64(p.Slices),
		Size:       int64(p.Size),
		Memory:     p.Memory,
		Max:        int64(p.Max),
		FreeStarts: convert(p.FreeStarts, func(i int) int64 { return int64(i) }),
	}
}

func migProfileFromProto(p *pb.MIGProfile) MIGProfile {
	return MIGProfile{
		Name:       p.GetName(),
		ID:         int(p.GetId()),
		Slices:     int(p.GetSlices()),
		Size:       int(p.GetSize()),
		Memory:     p.GetMemory(),
		Max:        int(p.GetMax()),
		FreeStarts: convert(p.GetFreeStarts(), func(i int64) int { return int(i) }),
	}
}

func createRequestToProto(r CreateRequest) *pb.CreateRequest {
	return &pb.CreateRequest{
		Gpu:        r.GPU,
		VmUuid:     r.VMUUID,
		Type:       r.Type,
		Profile:    r.Profile,
		Placement:  int64(r.Placement),
		DeviceUuid: r.DeviceUUID,
		Recreate:   r.Recreate,
	}
}

func createRequestFromProto(r *pb.CreateRequest) CreateRequest {
	return CreateRequest{
		GPU:        r.GetGpu(),
		VMUUID:     r.GetVmUuid(),
		Type:       r.GetType(),
		Profile:    r.GetProfile(),
		Placement:  int(r.GetPlacement()),
		DeviceUUID: r.GetDeviceUuid(),
		Recreate:   r.GetRecreate(),
	}
}

func removeRequestToProto(r RemoveRequest) *pb.RemoveRequest {
	return &pb.RemoveRequest{Id: r.ID, Gpu: r.GPU, OfInstallation: r.OfInstallation}
}

func removeRequestFromProto(r *pb.RemoveRequest) RemoveRequest {
	return RemoveRequest{ID: r.GetId(), GPU: r.GetGpu(), OfInstallation: r.GetOfInstallation()}
}

func hostdevToProto(h Hostdev) *pb.Hostdev {
	return &pb.Hostdev{Type: string(h.Type), Uuid: h.UUID, Addresses: nonEmpty(h.Addresses), Managed: h.Managed, Display: h.Display}
}

func hostdevFromProto(h *pb.Hostdev) Hostdev {
	return Hostdev{Type: HostdevType(h.GetType()), UUID: h.GetUuid(), Addresses: nonEmpty(h.GetAddresses()), Managed: h.GetManaged(), Display: h.GetDisplay()}
}

func deviceToProto(d Device) *pb.Device {
	return &pb.Device{
		Id:              d.ID,
		Kind:            string(d.Kind),
		Gpu:             d.GPU,
		Type:            d.Type,
		VmUuid:          d.VMUUID,
		Profile:         d.Profile,
		Placement:       int64(d.Placement),
		GpuInstance:     int64(d.GPUInstance),
		ComputeInstance: int64(d.ComputeInstance),
		Hostdev:         hostdevToProto(d.Hostdev),
		Managed:         d.Managed,
		Installation:    d.Installation,
		Absent:          d.Absent,
	}
}

func deviceFromProto(d *pb.Device) Device {
	return Device{
		ID:              d.GetId(),
		Kind:            gpu.Kind(d.GetKind()),
		GPU:             d.GetGpu(),
		Type:            d.GetType(),
		VMUUID:          d.GetVmUuid(),
		Profile:         d.GetProfile(),
		Placement:       int(d.GetPlacement()),
		GPUInstance:     int(d.GetGpuInstance()),
		ComputeInstance: int(d.GetComputeInstance()),
		Hostdev:         hostdevFromProto(d.GetHostdev()),
		Managed:         d.GetManaged(),
		Installation:    d.GetInstallation(),
		Absent:          d.GetAbsent(),
	}
}

func healthToProto(h Health) *pb.Health {
	return &pb.Health{Ok: h.OK, Detail: h.Detail}
}

func healthFromProto(h *pb.Health) Health {
	return Health{OK: h.GetOk(), Detail: h.GetDetail()}
}

// convert maps f over in; it returns nil for an empty slice.
func convert[A, B any](in []A, f func(A) B) []B {
	if len(in) == 0 {
		return nil
	}
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}

// nonEmpty returns s, or nil when it is empty.
func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
