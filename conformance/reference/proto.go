package main

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

var protoOptions = proto.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}
