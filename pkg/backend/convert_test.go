package backend

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// filled returns a T with every field, nested ones included, set to a
// distinct non-zero value, so that a field a conversion forgets shows up.
func filled[T any]() T {
	var v T
	n := 0
	fill(reflect.ValueOf(&v).Elem(), &n)
	return v
}

func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(-int64(*n) << 33) // negative and wider than 32 bits
	case reflect.Uint64:
		v.SetUint(uint64(*n) << 40)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range s.Len() {
			fill(s.Index(i), n)
		}
		v.Set(s)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

// roundTrip converts a Go value to proto, through the wire encoding, and back.
func roundTrip[T any, P proto.Message](to func(T) P, from func(P) T) func(any) (any, error) {
	return func(v any) (any, error) {
		b, err := proto.Marshal(to(v.(T)))
		if err != nil {
			return nil, err
		}
		var p P
		p = p.ProtoReflect().Type().New().Interface().(P)
		if err := proto.Unmarshal(b, p); err != nil {
			return nil, err
		}
		return from(p), nil
	}
}

func TestConvertRoundTrip(t *testing.T) {
	var (
		info      = roundTrip(infoToProto, infoFromProto)
		config    = roundTrip(configToProto, configFromProto)
		inventory = roundTrip(inventoryToProto, inventoryFromProto)
		gpu       = roundTrip(gpuToProto, gpuFromProto)
		vgpuType  = roundTrip(vgpuTypeToProto, vgpuTypeFromProto)
		profile   = roundTrip(migProfileToProto, migProfileFromProto)
		create    = roundTrip(createRequestToProto, createRequestFromProto)
		remove    = roundTrip(removeRequestToProto, removeRequestFromProto)
		hostdev   = roundTrip(hostdevToProto, hostdevFromProto)
		device    = roundTrip(deviceToProto, deviceFromProto)
		health    = roundTrip(healthToProto, healthFromProto)
	)
	tests := []struct {
		name  string
		value any
		trip  func(any) (any, error)
	}{
		{"Info/zero", Info{}, info},
		{"Info/full", filled[Info](), info},
		{"Config/zero", Config{}, config},
		{"Config/full", filled[Config](), config},
		{"Config/typical", Config{APIVersion: "v1", SysFSRoot: "/sys", StateDir: "/var/lib/gpuvm", NVML: NVMLAuto}, config},
		{"Inventory/zero", Inventory{}, inventory},
		{"Inventory/full", filled[Inventory](), inventory},
		{"GPU/zero", GPU{}, gpu},
		{"GPU/full", filled[GPU](), gpu},
		{"GPU/unknown NUMA node and future mode", GPU{Address: "0000:41:00.0", NUMANode: -1, Mode: "future", Memory: 80 << 30}, gpu},
		{"VGPUType/full", filled[VGPUType](), vgpuType},
		{"MIGProfile/zero", MIGProfile{}, profile},
		{"MIGProfile/full", filled[MIGProfile](), profile},
		{"MIGProfile/start 0", MIGProfile{Name: "1g.10gb", FreeStarts: []int{0, 1, 6}}, profile},
		{"CreateRequest/zero", CreateRequest{}, create},
		{"CreateRequest/full", filled[CreateRequest](), create},
		{"RemoveRequest/full", filled[RemoveRequest](), remove},
		{"Hostdev/full", filled[Hostdev](), hostdev},
		{"Device/zero", Device{}, device},
		{"Device/full", filled[Device](), device},
		{"Health/zero", Health{}, health},
		{"Health/full", filled[Health](), health},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.trip(tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.value) {
				t.Errorf("round trip changed the value\n got: %+v\nwant: %+v", got, tc.value)
			}
		})
	}
}

func TestConvertFromNilProto(t *testing.T) {
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"Info", infoFromProto(nil), Info{}},
		{"Config", configFromProto(nil), Config{}},
		{"Inventory", inventoryFromProto(nil), Inventory{}},
		{"Inventory with nil GPU", inventoryFromProto(&pb.Inventory{Gpus: []*pb.GPU{nil}}), Inventory{GPUs: []GPU{{}}}},
		{"CreateRequest", createRequestFromProto(nil), CreateRequest{}},
		{"RemoveRequest", removeRequestFromProto(nil), RemoveRequest{}},
		{"Device", deviceFromProto(nil), Device{}},
		{"Health", healthFromProto(nil), Health{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}
