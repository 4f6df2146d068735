c     fpvm3.h: PVM 3.4's Fortran constants for mig's libpvm3 (link
c     with -lfpvm3 -lpvm3; both name the same library). Written for mig
c     from PVM 3.4's documented interface: the same names and values.
c
c     Spawn flags
      integer PVMTASKDEFAULT, PVMTASKHOST, PVMTASKARCH, PVMTASKDEBUG
      integer PVMTASKTRACE, PVMMPPFRONT, PVMHOSTCOMPL, PVMNOSPAWNPARENT
      parameter (PVMTASKDEFAULT = 0, PVMTASKHOST = 1, PVMTASKARCH = 2)
      parameter (PVMTASKDEBUG = 4, PVMTASKTRACE = 8, PVMMPPFRONT = 16)
      parameter (PVMHOSTCOMPL = 32, PVMNOSPAWNPARENT = 64)
c     Notify kinds
      integer PVMTASKEXIT, PVMHOSTDELETE, PVMHOSTADD
      parameter (PVMTASKEXIT = 1, PVMHOSTDELETE = 2, PVMHOSTADD = 3)
c     Options
      integer PVMROUTE, PVMDONTROUTE, PVMALLOWDIRECT, PVMROUTEDIRECT
      integer PVMDEBUGMASK, PVMAUTOERR
      parameter (PVMROUTE = 1, PVMDONTROUTE = 1, PVMALLOWDIRECT = 2)
      parameter (PVMROUTEDIRECT = 3, PVMDEBUGMASK = 2, PVMAUTOERR = 3)
c     Encodings
      integer PVMDEFAULT, PVMRAW, PVMINPLACE
      parameter (PVMDEFAULT = 0, PVMRAW = 1, PVMINPLACE = 2)
c     Data types for pvmfpack, pvmfunpack, pvmfreduce
      integer STRING, BYTE1, INTEGER2, INTEGER4, REAL4
      integer COMPLEX8, REAL8, COMPLEX16, INTEGER8
      parameter (STRING = 0, BYTE1 = 1, INTEGER2 = 2, INTEGER4 = 3)
      parameter (REAL4 = 4, COMPLEX8 = 5, REAL8 = 6, COMPLEX16 = 7)
      parameter (INTEGER8 = 8)
c     Errors
      integer PVMOK, PVMBADPARAM, PVMMISMATCH, PVMNODATA, PVMNOHOST
      integer PVMNOFILE, PVMNOMEM, PVMBADMSG, PVMSYSERR, PVMNOBUF
      integer PVMNOSUCHBUF, PVMNULLGROUP, PVMDUPGROUP, PVMNOGROUP
      integer PVMNOTINGROUP, PVMNOINST, PVMHOSTFAIL, PVMNOPARENT
      integer PVMNOTIMPL, PVMDSYSERR, PVMBADVERSION, PVMOUTOFRES
      integer PVMDUPHOST, PVMCANTSTART, PVMALREADY, PVMNOTASK
      integer PVMNOTFOUND, PVMEXISTS
      parameter (PVMOK = 0, PVMBADPARAM = -2, PVMMISMATCH = -3)
      parameter (PVMNODATA = -5, PVMNOHOST = -6, PVMNOFILE = -7)
      parameter (PVMNOMEM = -10, PVMBADMSG = -12, PVMSYSERR = -14)
      parameter (PVMNOBUF = -15, PVMNOSUCHBUF = -16)
      parameter (PVMNULLGROUP = -17, PVMDUPGROUP = -18)
      parameter (PVMNOGROUP = -19, PVMNOTINGROUP = -20)
      parameter (PVMNOINST = -21, PVMHOSTFAIL = -22)
      parameter (PVMNOPARENT = -23, PVMNOTIMPL = -24)
      parameter (PVMDSYSERR = -25, PVMBADVERSION = -26)
      parameter (PVMOUTOFRES = -27, PVMDUPHOST = -28)
      parameter (PVMCANTSTART = -29, PVMALREADY = -30)
      parameter (PVMNOTASK = -31, PVMNOTFOUND = -32, PVMEXISTS = -33)
