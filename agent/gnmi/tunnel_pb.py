"""Messages of the openconfig grpctunnel protocol, defined here in code.

The wire names and field numbers are the protocol's (package ``grpctunnel``,
service ``Tunnel`` with the bidirectional streams ``Register`` and ``Tunnel``);
the definitions are swtel's own, built as a descriptor at import time so that no
``.proto`` file and no generated module is needed. Works with protobuf 3.21
(Debian 12: ``MessageFactory.GetPrototype``) and with current protobuf
(``message_factory.GetMessageClass``).

    Data         { int32 tag = 1; bytes data = 2; bool close = 3; }
    RegisterOp   { oneof registration { Target target = 1; Session session = 2;
                                        Subscription subscription = 3; } }
    Target       { TargetOp op = 1; bool accept = 2; string target = 3;
                   string target_type = 4; string error = 5; }
    Session      { int32 tag = 1; bool accept = 2; string target = 3;
                   string target_type = 4; string error = 5; }
    Subscription { SubscriptionOp op = 1; bool accept = 2; string target_type = 3;
                   string error = 4; }

``target_type`` travels as a string, the name of a ``TargetType`` value
(``"GNMI_GNOI"``).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "grpctunnel"
SERVICE = f"/{PACKAGE}.Tunnel"
REGISTER = f"{SERVICE}/Register"
TUNNEL = f"{SERVICE}/Tunnel"

# TargetType: the well-known port of each protocol; sent as the name.
TARGET_TYPES = {"UNKNOWN": 0, "SSH": 22, "NETCONF_SSH": 830, "OPENFLOW": 6653,
                "GNMI_GNOI": 9339, "GRIBI": 9340, "P4_RUNTIME": 9559}
GNMI_GNOI = "GNMI_GNOI"

# Target.op
TARGET_UNKNOWN, TARGET_ADD, TARGET_REMOVE = 0, 1, 2
# Subscription.op (upstream spells the names SUBCRIBE / UNSUBCRIBE)
SUB_UNKNOWN, SUBSCRIBE, UNSUBSCRIBE = 0, 1, 2

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="swtel/grpctunnel.proto", package=PACKAGE, syntax="proto3")

    def enum(name: str, values: dict[str, int]) -> None:
        e = fd.enum_type.add(name=name)
        for value_name, number in values.items():
            e.value.add(name=value_name, number=number)

    enum("TargetType", TARGET_TYPES)
    enum("TargetOp", {"TARGET_OP_UNKNOWN": TARGET_UNKNOWN, "ADD": TARGET_ADD, "REMOVE": TARGET_REMOVE})
    enum("SubscriptionOp", {"SUBSCRIPTION_OP_UNKNOWN": SUB_UNKNOWN, "SUBCRIBE": SUBSCRIBE,
                            "UNSUBCRIBE": UNSUBSCRIBE})

    def message(name: str, *specs: tuple) -> descriptor_pb2.DescriptorProto:
        m = fd.message_type.add(name=name)
        for field_name, number, ftype, *rest in specs:
            f = m.field.add(name=field_name, number=number, type=ftype, label=_F.LABEL_OPTIONAL)
            if rest:
                f.type_name = f".{PACKAGE}.{rest[0]}"
        return m

    message("Data", ("tag", 1, _F.TYPE_INT32), ("data", 2, _F.TYPE_BYTES), ("close", 3, _F.TYPE_BOOL))
    reg = message("RegisterOp", ("target", 1, _F.TYPE_MESSAGE, "Target"),
                  ("session", 2, _F.TYPE_MESSAGE, "Session"),
                  ("subscription", 3, _F.TYPE_MESSAGE, "Subscription"))
    reg.oneof_decl.add(name="registration")
    for f in reg.field:
        f.oneof_index = 0
    message("Target", ("op", 1, _F.TYPE_ENUM, "TargetOp"), ("accept", 2, _F.TYPE_BOOL),
            ("target", 3, _F.TYPE_STRING), ("target_type", 4, _F.TYPE_STRING),
            ("error", 5, _F.TYPE_STRING))
    message("Session", ("tag", 1, _F.TYPE_INT32), ("accept", 2, _F.TYPE_BOOL),
            ("target", 3, _F.TYPE_STRING), ("target_type", 4, _F.TYPE_STRING),
            ("error", 5, _F.TYPE_STRING))
    message("Subscription", ("op", 1, _F.TYPE_ENUM, "SubscriptionOp"), ("accept", 2, _F.TYPE_BOOL),
            ("target_type", 3, _F.TYPE_STRING), ("error", 4, _F.TYPE_STRING))
    return fd


# A pool of our own: nothing else loaded in the process can clash with these names.
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def _message_class(name: str) -> type:
    desc = _POOL.FindMessageTypeByName(f"{PACKAGE}.{name}")
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is not None:  # protobuf >= 4.22
        return get_class(desc)
    return message_factory.MessageFactory(_POOL).GetPrototype(desc)  # protobuf 3.x (Debian 12)


Data = _message_class("Data")
RegisterOp = _message_class("RegisterOp")
Target = _message_class("Target")
Session = _message_class("Session")
Subscription = _message_class("Subscription")


def serialize(message) -> bytes:
    return message.SerializeToString()


def parse_data(raw: bytes):
    return Data.FromString(raw)


def parse_register(raw: bytes):
    return RegisterOp.FromString(raw)
